// Engine, target side: code into the JIT cache. Loads (in place, in the
// compile worker, on the GPU), tiers switched between dispatches, the cache's
// bounds, and code a frame waits for: asked for, arrived, refused.
#include "engine/code_vetting.hpp"
#include "engine/engine.hpp"
#include "gpu/gpu_service.hpp"
#include "jit/container_images.hpp"
#include "trust/envelope.hpp"

#include <threechains/container.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace threechains::detail {

void Engine::promote_tiers() {
  Target& t = *target_;
  if (!t.vetting_waits.empty() && t.vetting->has_finished()) finish_vetting();
  // Also with no frame waiting: the cache may hold the window of a load
  // cancelled while it was verified, given back when its verdict is taken.
  if (!t.compiling.empty() || t.cache.compiles_in_progress()) finish_compiles();
  Promotions done = t.cache.promote_ready();
  t.stats.promotions += done.promoted;
  t.stats.promotion_failures += done.failures.size();
  for (std::string& failure : done.failures) report(Error(errc::jit_failed, std::move(failure)));
}

Engine::Loaded Engine::load(Link& link, CodeId id, CodecId codec, std::span<const std::byte> code,
                            std::vector<std::byte>* owned) {
  Target& t = *target_;
  // Waiting for this code's compile, or for the load its key has under way
  // (a compile or a check aside: one at a time, so no key fills a queue;
  // code of the key's that is loaded already waits too): asked again each
  // poll, so before anything that costs (a copy, a digest, a signature check).
  const auto waits = [&] { return t.compiling.contains(id) || link.key->compiling; };
  if (waits() && (!drop_abandoned_compiles() || waits())) [[unlikely]]
    return {nullptr, true};
  try {
    if (code.size() > t.options.limits.max_code_bytes) {
      throw Error(errc::limit_exceeded,
                  "code of " + std::to_string(code.size()) + " bytes, over the " +
                      std::to_string(t.options.limits.max_code_bytes) +
                      " this Receiver accepts (ReceiverLimits::max_code_bytes)");
    }
    if (const std::optional<std::string> why = key_refused(*link.key))
      throw Error(errc::code_refused, *why);
    // The code may sit in the peer's ring, which the peer can still write: the
    // digest, the signature check, the identity check and the load all read
    // one private copy, so what was verified is what is loaded.
    std::vector<std::byte> private_code =
        owned != nullptr ? std::move(*owned) : std::vector<std::byte>(code.begin(), code.end());
    const bool room_aside = t.vetting_bytes + private_code.size() <= CodeVetting::kMaxWaitingBytes;
    if (private_code.size() >= CodeVetting::kAside && room_aside) {
      vet_aside(link, id, codec, std::move(private_code));
      return {nullptr, true};
    }
    const ContentDigest digest = content_digest(private_code);
    // Small code that would run confined: what its digest settles (loaded
    // already, banned, an identity taken) is answered here, as for any code;
    // its signature check (70 us on the 2-core VM) and all that follows go
    // aside, nothing a peer waiting on this thread should pay for. Code of a
    // signer trusted with native code is checked here: its first call is
    // the one a user times (a frame that names such a signer falsely costs
    // this thread one check, as every small container did before).
    if (room_aside && claims_untrusted_signer(t.options.trust, private_code)) {
      if (std::optional<Loaded> answered = answered_by_content(link, id, digest)) return *answered;
      vet_aside(link, id, codec, std::move(private_code));
      return {nullptr, true};
    }
    return load_vetted(link, id, codec,
                       {std::move(private_code), digest, std::nullopt, std::nullopt});
  } catch (const Error& error) {
    refuse_load(&link, id, error);
    return {nullptr, false};
  }
}

std::optional<Engine::Loaded> Engine::answered_by_content(Link& link, CodeId id,
                                                          const ContentDigest& digest) {
  Target& t = *target_;
  if (link.key->banned.contains(digest)) {
    throw Error(errc::code_refused, "this code trapped " +
                                        std::to_string(t.options.limits.max_traps_per_code) +
                                        " times here for " + link.key->name +
                                        " (or its compile failed) and is refused to it "
                                        "(ReceiverLimits::max_traps_per_code)");
  }
  if (const auto known = t.digests.find(id); known != t.digests.end()) {
    // Loaded already, for another peer (or for this one before): the same
    // code runs from the cache; other code under its identity never does.
    if (known->second != digest) {
      throw Error(errc::code_refused,
                  "its code identity " + std::to_string(id) +
                      " names other code here (identities are a shorthand; code is "
                      "known by its BLAKE2b-256)");
    }
    if (const CachedIfunc* entry = t.cache.find_ifunc(id)) {
      link.in.shown.insert(id);
      return Loaded{entry, false};
    }
  } else if (t.cache.contains(id)) {
    throw Error(errc::code_refused,
                "its code identity " + std::to_string(id) +
                    " is taken by code this process loaded into Receiver::cache() itself");
  }
  return std::nullopt;
}

Engine::Loaded Engine::load_vetted(Link& link, CodeId id, CodecId codec, VettedCode vetted) {
  Target& t = *target_;
  // `code` is not read after start_load() below (which may take the bytes).
  const std::span<const std::byte> code = vetted.code;
  const std::size_t code_bytes = code.size();
  const ContentDigest& digest = vetted.digest;
  try {
    if (std::optional<Loaded> answered = answered_by_content(link, id, digest)) return *answered;
    // Before anything parses it: whose code is this, and is it intact?
    if (vetted.refused) throw *vetted.refused;
    const Confine confine =
        vetted.confine ? *vetted.confine : check_code_trust(t.options.trust, code);
    std::optional<LoadResult> result;
    if (confine == Confine::yes) {
      if (const std::optional<std::string> why = key_throttled(*link.key))
        throw Error(errc::code_refused, *why);
      if (t.options.gpu) refuse_confined_gpu(code);
      // What the key holds already, before a worker is started for more.
      if (link.key->code_bytes + code.size() > t.options.limits.max_code_bytes_per_key) {
        throw Error(errc::limit_exceeded,
                    link.key->name + " holds " + std::to_string(link.key->code_bytes) +
                        " bytes of code here already: " + std::to_string(code.size()) +
                        " more would pass the " +
                        std::to_string(t.options.limits.max_code_bytes_per_key) +
                        " a key may (ReceiverLimits::max_code_bytes_per_key)");
      }
      // Compiled in a worker process while this thread serves on. The code
      // is handed over unless a Node keeps it (then `code` stays valid).
      result = keep_code_ ? t.cache.start_load(id, codec, code, confine)
                          : t.cache.start_load(id, codec, std::move(vetted.code), confine);
      if (!result) {
        link.key->compiling = true;
        t.compiling.emplace(
            id, Target::Compiling{digest, link.key, links_.at(link.endpoint.handle()), code_bytes,
                                  keep_code_ ? std::move(vetted.code) : std::vector<std::byte>{}});
        return {nullptr, true};
      }
    } else {
      result = t.options.gpu ? load_with_gpu(id, codec, code, confine)
                             : t.cache.load(id, codec, code, confine);
    }
    link.in.shown.insert(id);
    return {admit_loaded(link.key, id, digest, *result, code_bytes,
                         keep_code_ ? std::move(vetted.code) : std::vector<std::byte>{}, confine),
            false};
  } catch (const Error& error) {
    refuse_load(&link, id, error);
    return {nullptr, false};
  }
}

void Engine::vet_aside(Link& link, CodeId id, CodecId codec, std::vector<std::byte> code) {
  Target& t = *target_;
  if (!t.vetting) {
    try {
      t.vetting = std::make_unique<CodeVetting>(t.options.trust,
                                                detail::HelperCpus(t.options.jit.helper_cpus));
    } catch (const std::system_error& error) {  // no thread to be had
      throw Error(errc::jit_failed,
                  std::string("starting the thread that checks code: ") + error.what());
    }
  }
  const uint64_t serial = t.next_vet_serial++;
  const std::size_t bytes = code.size();
  t.vetting_waits.emplace(
      serial, Target::Vetting{link.key, links_.at(link.endpoint.handle()), id, codec, bytes});
  try {
    t.vetting->submit({serial, id, std::move(code)});
  } catch (...) {
    t.vetting_waits.erase(serial);
    throw;
  }
  t.vetting_bytes += bytes;
  link.key->compiling = true;  // one load per key at a time, as for its compiles
}

void Engine::finish_vetting() {
  Target& t = *target_;
  for (CodeVetting::Vetted& vetted : t.vetting->take_finished()) {
    const auto it = t.vetting_waits.find(vetted.serial);
    if (it == t.vetting_waits.end()) continue;
    Target::Vetting waiting = std::move(it->second);
    t.vetting_waits.erase(it);
    t.vetting_bytes -= std::min(t.vetting_bytes, waiting.bytes);
    waiting.key->compiling = false;
    const std::shared_ptr<Link> link = waiting.link.lock();
    // Its source gone or going: nothing of it loads, nothing is judged.
    Link* source = link && !link->removed && link->receiving() && link->misbehaved.empty()
                       ? link.get()
                       : nullptr;
    bool loaded = false;
    if (source != nullptr && t.compiling.contains(waiting.id)) {
      // Another key's copy of the same code started compiling meanwhile:
      // the frame looks again, waits for that compile, and is checked again.
      source = nullptr;
    } else if (source != nullptr) {
      try {
        // What changed while it was checked: the key may have been refused.
        if (const std::optional<std::string> why = key_refused(*waiting.key)) {
          refuse_load(source, waiting.id, Error(errc::code_refused, *why));
        } else {
          const Loaded result =
              load_vetted(*source, waiting.id, waiting.codec,
                          {std::move(vetted.code), vetted.digest,
                           vetted.error ? std::nullopt : std::optional<Confine>(vetted.confine),
                           std::move(vetted.error)});
          if (result.compiling) continue;  // in a worker now: finish_compiles settles its frames
          loaded = result.entry != nullptr;
        }
      } catch (const std::exception& error) {  // each result is answered: no key stays waiting
        report(Error(errc::jit_failed, "code from " + source->peer_name +
                                           ": loading it after its check failed: " + error.what()));
      }
    }
    wake_waiting(waiting.id, source, loaded, waiting.key.get());
  }
}

void Engine::wake_waiting(CodeId id, const Link* source, bool loaded, const KeyRecord* key) {
  // Every frame that waited for this code looks again: the one that
  // brought it runs now, or is dropped with it; others (another
  // connection's copy) load it themselves. So do the frames of the key
  // that waited for this load to end (one per key at a time), a code
  // reply that came meanwhile included: they ask for it again.
  for (const auto& [ep, waiting] : links_) {
    Inbound& in = waiting->in;
    if (in.stalled_on == 0) continue;
    if (in.stalled_code == id && !loaded && waiting.get() == source) {
      ++target_->stats.frames_rejected;
      skip_stalled(*waiting);
    } else if (in.stalled_code == id || waiting->key.get() == key) {
      in.stalled_on = 0;
    }
  }
  control_pending_ = true;  // frames delivered by AM wait in backlogs, drained there
}

const CachedIfunc* Engine::admit_loaded(const std::shared_ptr<KeyRecord>& charged, CodeId id,
                                        const ContentDigest& digest, const LoadResult& result,
                                        std::size_t code_bytes,
                                        std::vector<std::byte> kept_container, Confine confine) {
  Target& t = *target_;
  t.digests.insert_or_assign(id, digest);
  t.names.insert_or_assign(id, result.name);
  ifunc_record(id).name = result.name;
  // Charged to the key that loaded it (a new entry: code loaded already
  // returned before): its container, and what it holds.
  const std::size_t bytes = code_bytes + t.cache.committed_bytes(id);
  note_loaded(id, bytes);
  t.cache_use[id].charged = charged;
  KeyRecord& key = *charged;
  key.code_bytes += bytes;
  if (key.code_bytes > t.options.limits.max_code_bytes_per_key) {
    const std::size_t held = key.code_bytes - bytes;
    forget(id);
    throw Error(errc::limit_exceeded, "its code would hold " + std::to_string(bytes) +
                                          " bytes here (container and " + "globals), and " +
                                          key.name + " holds " + std::to_string(held) +
                                          " already: over the " +
                                          std::to_string(t.options.limits.max_code_bytes_per_key) +
                                          " a key may (ReceiverLimits::max_code_bytes_per_key)");
  }
  trim_cache(id);  // after a load that worked: bad code never costs good code its place
  if (keep_code_) {
    // Kept for injected code that sends it onward; parsed again only if it does.
    t.code_by_name[result.name] = id;
    t.code_store.insert_or_assign(
        id, Target::StoredCode{std::move(kept_container), std::nullopt, confine});
  }
  count_load(result);
  return t.cache.find_ifunc(id);
}

void Engine::refuse_load(Link* link, CodeId id, const Error& error) {
  Target& t = *target_;
  if (error.is(errc::code_refused) || error.is(errc::import_refused) ||
      error.is(errc::limit_exceeded)) {
    ++t.stats.code_refused;
    ++ifunc_record(id).refusals;
  }
  report(Error(static_cast<errc>(error.code().category() == threechains_category()
                                     ? error.code().value()
                                     : static_cast<int>(errc::jit_failed)),
               "code from " + (link != nullptr ? link->peer_name : std::string("a peer gone")) +
                   ": " + error.context()));
  if (link != nullptr) send_code_refusal(*link, id, error);
}

void Engine::finish_compiles() {
  Target& t = *target_;
  for (JitCache::FinishedLoad& done : t.cache.finish_loads()) {
    const auto it = t.compiling.find(done.id);
    if (it == t.compiling.end()) continue;
    Target::Compiling compiling = std::move(it->second);
    t.compiling.erase(it);
    compiling.key->compiling = false;
    const std::shared_ptr<Link> link = compiling.link.lock();
    Link* source = link && !link->removed ? link.get() : nullptr;
    bool loaded = false;
    if (done.result) {
      try {
        (void)admit_loaded(compiling.key, done.id, compiling.digest, *done.result,
                           compiling.code_bytes, std::move(compiling.container), Confine::yes);
        if (source != nullptr) source->in.shown.insert(done.id);
        loaded = true;
      } catch (const Error& error) {
        refuse_load(source, done.id, error);
      }
    } else {
      const Error& error = *done.error;
      // The worker refused it, crashed on it, or ran out of time or memory
      // on it: that depends on the content alone, so it is refused to the
      // key from now on (no worker is started for it again), and counts as
      // one of the key's traps. A worker that could not run at all is the
      // target's failure, not the code's; nor is a container refused before
      // its compile (as JitCache::load refuses it at once).
      if (!done.target_failed && !done.before_compile) {
        if (compiling.key->banned.size() < KeyRecord::kMaxBanned)
          compiling.key->banned.insert(compiling.digest);
        count_key_trap(*compiling.key);
      }
      refuse_load(source, done.id, error);
    }
    wake_waiting(done.id, source, loaded, compiling.key.get());
  }
}

// Compiles the cache no longer runs (the application cleared it): their
// keys may compile again, and the frames that waited look again. True if
// there were any.
bool Engine::drop_abandoned_compiles() {
  Target& t = *target_;
  bool dropped = false;
  for (auto it = t.compiling.begin(); it != t.compiling.end();) {
    if (t.cache.loading(it->first)) {
      ++it;
      continue;
    }
    it->second.key->compiling = false;
    for (const auto& [ep, waiting] : links_) {
      if (waiting->in.stalled_on != 0 && waiting->in.stalled_code == it->first)
        waiting->in.stalled_on = 0;
    }
    it = t.compiling.erase(it);
    dropped = true;
  }
  if (dropped) control_pending_ = true;  // frames delivered by AM wait in backlogs
  return dropped;
}

void Engine::refuse_confined_gpu(std::span<const std::byte> code) {
  for (const ParsedImage& image : parse_container(code)) {
    if (!is_gpu_triple(image.triple)) continue;
    throw Error(errc::code_refused,
                "ifunc '" + image.name +
                    "' is GPU code from a signer this target does not fully trust: GPU code "
                    "cannot be confined (it reaches all of the GPU's memory); trust the signer "
                    "with Trust::allow_native_code_signer");
  }
}

// A Receiver with ReceiverOptions::gpu: a container with a GPU image runs its
// kernel there (and its CPU image, if it has one for this host, is loaded
// for <name>_complete); any other goes to the JIT cache as ever.
LoadResult Engine::load_with_gpu(CodeId id, CodecId codec, std::span<const std::byte> code,
                                 Confine confine) {
  Target& t = *target_;
  if (code_identity(code) != id) return t.cache.load(id, codec, code, confine);  // it says why
  const std::vector<ParsedImage> images = parse_container(code);
  const ParsedImage* gpu_image = nullptr;
  bool cpu_images = false;
  for (const ParsedImage& image : images) {
    if (!is_gpu_triple(image.triple)) {
      cpu_images = true;
    } else if (gpu_image == nullptr) {
      gpu_image = &image;
    }
  }
  if (gpu_image == nullptr) return t.cache.load(id, codec, code, confine);
  if (confine == Confine::yes) refuse_confined_gpu(code);
  if (!t.gpu) {
    throw Error(errc::gpu_failed,
                "ifunc '" + gpu_image->name +
                    "' is GPU code and this Receiver has no GPU: " + t.gpu_unavailable);
  }
  const auto started = std::chrono::steady_clock::now();
  LoadResult result;
  bool cpu_loaded = false;
  if (cpu_images) {
    try {
      result = t.cache.load(id, codec, code, Confine::no);
      cpu_loaded = true;
    } catch (const Error& error) {
      // CPU images for other hosts only: the kernel runs without a host part.
      if (!error.is(errc::no_image_for_target)) throw;
    }
  }
  bool gpu_loaded = false;
  try {
    const gpu::Service::Loaded kernel = t.gpu->load(id, *gpu_image);
    gpu_loaded = true;
    const auto complete =
        cpu_loaded ? reinterpret_cast<IfuncMain>(t.cache.lookup(id, gpu_image->name + "_complete"))
                   : nullptr;
    t.cache.adopt_gpu(id, kernel.kernel, complete);
  } catch (...) {
    if (gpu_loaded) t.gpu->unload(id);
    if (cpu_loaded) (void)t.cache.evict(id);
    throw;
  }
  result.name = gpu_image->name;
  result.triple = gpu_image->triple;
  result.tier = 1;
  result.compile_time = std::chrono::steady_clock::now() - started;
  return result;
}

void Engine::count_load(const LoadResult& result) noexcept {
  ReceiverStats& stats = target_->stats;
  ++stats.code_loads;
  stats.last_load_time = result.compile_time;
  stats.last_load_tier = result.tier;
  stats.total_load_time += result.compile_time;
}

void Engine::note_loaded(CodeId id, std::size_t bytes) {
  Target& t = *target_;
  Target::CacheUse& use = t.cache_use[id];
  t.cached_code_bytes += bytes - use.bytes;
  use.bytes = bytes;
  use.last_use = ++t.use_clock;
}

void Engine::touch(CodeId id) noexcept {
  Target& t = *target_;
  t.last_dispatched = id;
  const auto it = t.cache_use.find(id);
  if (it != t.cache_use.end()) it->second.last_use = ++t.use_clock;
}

void Engine::trim_cache(CodeId keep) {
  Target& t = *target_;
  const ReceiverLimits& limits = t.options.limits;
  while (t.cache_use.size() > limits.max_cached_ifuncs ||
         t.cached_code_bytes > limits.max_cached_code_bytes) {
    // The least recently used; never the one just loaded, nor the one running
    // now (its code is on the stack).
    auto victim = t.cache_use.end();
    for (auto it = t.cache_use.begin(); it != t.cache_use.end(); ++it) {
      if (it->first == keep || (it->first == t.running.code_id && t.running.code_id != 0)) continue;
      if (victim == t.cache_use.end() || it->second.last_use < victim->second.last_use) victim = it;
    }
    if (victim == t.cache_use.end()) return;  // only those two: they stay
    forget(victim->first);
    ++t.stats.evictions;
  }
}

void Engine::expose_anew() {
  Target& t = *target_;
  t.expose_regions();
  std::vector<CodeId> windowed;
  for (const auto& [id, use] : t.cache_use) {
    const CachedIfunc* const ifunc = t.cache.find_ifunc(id);
    // Never the one running now (its code is on the stack: an ifunc of a
    // Node's that exposes).
    if (ifunc != nullptr && t.cache.in_window(*ifunc) &&
        (id != t.running.code_id || t.running.code_id == 0))
      windowed.push_back(id);
  }
  for (const CodeId id : windowed) forget(id);
}

void Engine::forget(CodeId id) {
  Target& t = *target_;
  try {
    (void)t.cache.evict(id);
  } catch (const Error& error) {  // LLVM could not free it: forgotten all the same
    report(error);
  }
  if (t.gpu) t.gpu->unload(id);
  if (const auto it = t.cache_use.find(id); it != t.cache_use.end()) {
    t.cached_code_bytes -= it->second.bytes;
    if (it->second.charged) it->second.charged->code_bytes -= it->second.bytes;
    t.cache_use.erase(it);
  }
  t.code_store.erase(id);
  t.digests.erase(id);
  t.names.erase(id);
  // Whoever showed it must show it again: the next code under this identity
  // may be another's.
  for (const auto& [ep, link] : links_) link->in.forget_shown(id);
  std::erase_if(t.code_by_name, [id](const auto& entry) { return entry.second == id; });
  if (t.last_dispatched == id) t.last_dispatched = 0;
}

void Engine::install(const Ifunc& ifunc, Confine confine) {
  Target& t = *target_;
  if (t.cache.contains(ifunc.id()) && t.code_store.contains(ifunc.id())) return;
  if (!t.cache.contains(ifunc.id())) {
    const LoadResult result = t.options.gpu
                                  ? load_with_gpu(ifunc.id(), ifunc.codec(), ifunc.code(), confine)
                                  : t.cache.load(ifunc.id(), ifunc.codec(), ifunc.code(), confine);
    t.digests.insert_or_assign(ifunc.id(), content_digest(ifunc.code()));
    t.names.insert_or_assign(ifunc.id(), ifunc.name());
    ifunc_record(ifunc.id()).name = ifunc.name();
    note_loaded(ifunc.id(), ifunc.code().size());
    trim_cache(ifunc.id());
    count_load(result);
  }
  t.code_by_name[ifunc.name()] = ifunc.id();
  t.code_store.insert_or_assign(ifunc.id(), Target::StoredCode{{}, ifunc, confine});
}

Confine Engine::confinement_of(CodeId id) const {
  const auto it = target_->code_store.find(id);
  return it == target_->code_store.end() ? Confine::yes : it->second.confine;
}

const Ifunc* Engine::stored(CodeId id) {
  const auto it = target_->code_store.find(id);
  if (it == target_->code_store.end()) return nullptr;
  Target::StoredCode& code = it->second;
  if (!code.ifunc) code.ifunc.emplace(Ifunc::from_container(std::move(code.container)));
  return &*code.ifunc;
}

const Ifunc* Engine::stored(const std::string& name) {
  const auto it = target_->code_by_name.find(name);
  return it == target_->code_by_name.end() ? nullptr : stored(it->second);
}

// A cached frame for code this target does not hold: ask its source once and
// leave the frame in its slot (the source cannot overwrite it: no credit).
bool Engine::request_code(Link& link, const FrameView& frame) {
  Inbound& in = link.in;
  if (in.stalled_on == in.expected) return false;
  in.stalled_on = in.expected;
  in.stalled_code = frame.code_id();
  ++target_->stats.cache_misses;
  try {
    outbox_.send(link.endpoint, kAmNeedCode, NeedCode{in.expected, frame.code_id()}, {});
  } catch (const Error&) {  // the source went away: noticed as lost
  }
  return false;
}

void Engine::accept_code(Link& link, Inbound::CodeArrival& arrival) {
  if (!target_) return;
  Inbound& in = link.in;
  // An answer about other code (a late one, or one nobody asked for) leaves
  // the stalled frame alone.
  const bool settles_stall = in.stalled_on != 0 && arrival.header.code_id == in.stalled_code;
  if (arrival.header.found == 0) {
    // The source cannot supply the code: the stalled frame can never run.
    if (settles_stall) {
      ++target_->stats.frames_rejected;
      report(Error(errc::unknown_code,
                   "frame " + std::to_string(in.stalled_on) + " from " + link.peer_name +
                       " dropped: its source no longer holds the code it names"));
      skip_stalled(link);
    }
    return;
  }
  if (in.has_shown(arrival.header.code_id) && target_->cache.contains(arrival.header.code_id))
    return;
  if (arrival.too_large != 0) {
    const Error error(errc::limit_exceeded,
                      "code of " + std::to_string(arrival.too_large) + " bytes from " +
                          link.peer_name + ", over the " +
                          std::to_string(target_->options.limits.max_code_bytes) +
                          " this Receiver accepts (ReceiverLimits::max_code_bytes)");
    ++target_->stats.code_refused;
    ++ifunc_record(arrival.header.code_id).refusals;
    report(error);
    send_code_refusal(link, arrival.header.code_id, error);
    if (settles_stall) {
      ++target_->stats.frames_rejected;
      skip_stalled(link);
    }
    return;
  }
  const Loaded loaded =
      load(link, arrival.header.code_id, static_cast<CodecId>(arrival.header.codec), arrival.code,
           &arrival.code);
  if (loaded.compiling) return;  // the frame stays stalled; finish_compiles settles it
  if (loaded.entry != nullptr) {
    // Loaded: if the stalled frame misses again (another link's code evicted
    // this meanwhile), it asks again instead of waiting for an answer given.
    if (settles_stall) in.stalled_on = 0;
    return;
  }
  if (settles_stall) {
    ++target_->stats.frames_rejected;
    skip_stalled(link);  // the code is bad; the frame waiting for it cannot run
  }
}

}  // namespace threechains::detail
