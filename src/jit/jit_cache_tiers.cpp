// JitCache: tiered code. An ifunc runs its tier-0 object at once; after a
// few calls its IR is compiled for this host by the background compiler,
// and the result is switched to between dispatches (promote_ready).
#include "jit/jit_cache_impl.hpp"

namespace threechains {

IfuncMain JitCache::Impl::load_tiered(CodeId id, const ParsedImage* object, const ParsedImage* ir,
                                      LoadResult& result) {
  const bool use_ir = ir != nullptr && (object == nullptr || tiering == Tiering::ir_only);
  if (use_ir) {
    result.tier = 1;
    return load(id, CodecId::bitcode, *ir, result.from_code_cache);
  }
  // The key (a BLAKE2b of the IR among it) once, for the lookup and the promotion.
  const std::string key =
      ir != nullptr && tiering == Tiering::tiered && store ? store_key(id, *ir) : std::string();
  if (!key.empty()) {
    if (const IfuncMain stored = link_stored(id, *ir, key)) {  // compiled by an earlier run
      result.tier = 1;
      result.from_code_cache = true;
      return stored;
    }
  }
  const IfuncMain entry = link(id, CodecId::binary, *object, nullptr);
  result.tier = 0;
  if (ir != nullptr && tiering == Tiering::tiered) {
    Promotion promotion{next_serial++, promote_after_calls, false, false, *ir, key};
    drop_promotion(id);
    auto [it, inserted] = promotions.emplace(id, std::move(promotion));
    if (it->second.calls_left == 0) {
      it->second.due = true;
      due.push_back(id);
      ++in_progress;
    } else {
      ++awaiting;
    }
  }
  return entry;
}

void JitCache::Impl::submit(CodeId id, Promotion& promotion) {
  if (!compiler) {
    compiler = std::make_unique<BackgroundCompiler>(*host_builder, optimisation_level, policy,
                                                    calls, store ? &*store : nullptr, helper_cpus);
  }
  // The bytes go to the compiler; name, triple and deps stay for the link.
  ParsedImage image{promotion.ir.name, promotion.ir.triple, promotion.ir.kind, promotion.ir.deps,
                    std::move(promotion.ir.bytes)};
  promotion.ir.bytes = {};
  promotion.submitted = true;
  compiler->submit({promotion.serial, id, std::move(image), promotion.store_key});
}

void JitCache::Impl::note_call(CodeId id) {
  const auto it = promotions.find(id);
  if (it == promotions.end() || it->second.due || it->second.submitted) return;
  if (it->second.calls_left > 0) --it->second.calls_left;
  if (it->second.calls_left == 0) {
    it->second.due = true;
    due.push_back(id);
    --awaiting;
    ++in_progress;
  }
}

void JitCache::Impl::drop_promotion(CodeId id) {
  const auto it = promotions.find(id);
  if (it == promotions.end()) return;
  if (it->second.due || it->second.submitted) {
    --in_progress;
  } else {
    --awaiting;
  }
  promotions.erase(it);
}

void JitCache::Impl::start_due_compiles() {
  for (const CodeId id : due) {
    const auto it = promotions.find(id);
    if (it != promotions.end() && it->second.due && !it->second.submitted) submit(id, it->second);
  }
  due.clear();
}

std::vector<std::pair<CodeId, IfuncMain>> JitCache::Impl::promote_ready(
    std::vector<std::string>& failures, unsigned& kept_at_tier0) {
  start_due_compiles();
  std::vector<std::pair<CodeId, IfuncMain>> promoted;
  if (!compiler || !compiler->has_finished()) return promoted;
  for (BackgroundCompiler::Result& done : compiler->take_finished()) {
    const auto it = promotions.find(done.id);
    if (it == promotions.end() || it->second.serial != done.serial) continue;  // evicted since
    const Promotion promotion = std::move(it->second);
    promotions.erase(it);
    --in_progress;
    if (!done.stays_at_tier0.empty()) {
      ++kept_at_tier0;
      continue;
    }
    if (!done.error.empty()) {
      failures.push_back("ifunc '" + promotion.ir.name + "': compiling tier 1 for this CPU: " +
                         done.error + " (tier 0 keeps running)");
      continue;
    }
    try {
      promoted.emplace_back(done.id, link(done.id, CodecId::bitcode, promotion.ir, &done.object));
    } catch (const Error& e) {
      failures.push_back("ifunc '" + promotion.ir.name + "': linking tier 1: " + e.what() +
                         " (tier 0 keeps running)");
    }
  }
  return promoted;
}

}  // namespace threechains
