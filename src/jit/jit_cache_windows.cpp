// JitCache: the window tier of confined code (ConfinementOptions::
// window_tier; confine/window_tier.hpp). A window per loaded code, reused
// after evictions; the verifier between linking and the first run.
#include "jit/jit_cache_impl.hpp"

#include "jit/window_memory.hpp"
#include "jit/window_verification.hpp"

#include <llvm/Object/ObjectFile.h>

#include <sys/mman.h>

namespace threechains {

namespace {
// Where a window's payloads are copied, to begin with; a larger payload
// takes a larger area (WindowedCode::run). A page: a caller change wipes
// all of it.
constexpr std::size_t kPayloadArea = std::size_t{4} << 10;

// Window code's graphs: one with initialisers or finalisers is refused
// (nothing would run them, and nothing of window code is to run but its
// entry). Their allocation actions, .eh_frame registration among them, are
// never run (jit/window_memory.cpp).
class WindowGraphRules final : public llvm::orc::ObjectLinkingLayer::Plugin {
 public:
  explicit WindowGraphRules(jit::RoutedMemoryManager& routed) : routed_(routed) {}
  void modifyPassConfig(llvm::orc::MaterializationResponsibility& mr,
                        llvm::jitlink::LinkGraph& /*graph*/,
                        llvm::jitlink::PassConfiguration& config) override {
    if (!routed_.routes(&mr.getTargetJITDylib())) return;
    config.PrePrunePasses.push_back([](llvm::jitlink::LinkGraph& g) -> llvm::Error {
      for (const llvm::jitlink::Section& section : g.sections()) {
        const llvm::StringRef name = section.getName();
        for (const llvm::StringRef refused : {".init_array", ".fini_array", ".preinit_array",
                                              ".ctors", ".dtors", ".init", ".fini"}) {
          if (name == refused || name.starts_with((refused + ".").str())) {
            return llvm::make_error<llvm::StringError>(
                "window code may not have initialisers or finalisers (section " + name.str() + ")",
                llvm::inconvertibleErrorCode());
          }
        }
      }
      return llvm::Error::success();
    });
  }
  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility&) override {
    return llvm::Error::success();
  }
  llvm::Error notifyRemovingResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey) override {
    return llvm::Error::success();
  }
  void notifyTransferringResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey,
                                   llvm::orc::ResourceKey) override {}

 private:
  jit::RoutedMemoryManager& routed_;  // the layer's memory manager: lives as long
};

}  // namespace

std::shared_ptr<llvm::orc::ObjectLinkingLayer::Plugin> jit_cache_detail::window_graph_rules(
    jit::RoutedMemoryManager& routed) {
  return std::make_shared<WindowGraphRules>(routed);
}

JitCache::Impl::WindowSlot& JitCache::Impl::acquire_window() {
  if (!spare_windows.empty()) {
    WindowSlot& slot = *spare_windows.back();
    spare_windows.pop_back();
    return slot;
  }
  // Whatever keeps a window from being had, the code takes the checked
  // tier (before_checked_retry): a want of windows is no fault of the code's.
  no_window_for_link = true;
  if (windows.size() >= max_windows) {
    throw Error(errc::limit_exceeded, "no confinement window left: " + std::to_string(max_windows) +
                                          " codes of the window tier are loaded");
  }
  try {
    windows.emplace_back();
  } catch (...) {  // no address space for it: none is tried again until one is given back
    window_creation_failed = true;
    throw;
  }
  WindowSlot& slot = windows.back();
  try {
    slot.payload = slot.window.allocate(kPayloadArea, true);
    if (arena) arena->attach(slot.window);
  } catch (...) {
    windows.pop_back();
    window_creation_failed = true;
    throw;
  }
  no_window_for_link = false;
  return slot;
}

void JitCache::Impl::release_window(WindowSlot& slot) noexcept {
  // The next code's payloads start from zeroed pages (private anonymous
  // memory reads as zero once dropped).
  (void)madvise(slot.payload.data(), slot.payload.size(), MADV_DONTNEED);
  spare_windows.push_back(&slot);
  window_creation_failed = false;
}

bool JitCache::Impl::claims_window_shape(const std::vector<std::byte>& object) {
  const llvm::StringRef bytes(reinterpret_cast<const char*>(object.data()), object.size());
  auto file = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(bytes, "confined"));
  if (!file) {
    llvm::consumeError(file.takeError());
    return false;  // the link refuses it, as it would any object
  }
  for (const llvm::object::SymbolRef& symbol : (*file)->symbols()) {
    auto name = symbol.getName();
    if (!name) {
      llvm::consumeError(name.takeError());
      continue;
    }
    if (*name == confined::kGlobalsSymbol) return false;
  }
  return true;
}

std::vector<confined::CodeRange> JitCache::Impl::window_code_ranges(WindowSlot& slot,
                                                                    const std::string& name) {
  jit::WindowMemoryMapper* const mapper = routed->mapper_of(slot.window);
  if (mapper == nullptr) throw Error(errc::jit_failed, "ifunc '" + name + "': no window mapper");
  // The machine code as it will run: linked, relocated, read-only. The
  // window holds this code only, so this is every executable byte there.
  return mapper->executable_code();
}

confined::Code JitCache::Impl::window_code(WindowSlot& slot, CodeId id, const std::string& name,
                                           uint64_t main) {
  const std::vector<confined::CodeRange> code = window_code_ranges(slot, name);
  return window_code_from_verdict(
      slot, id, name, main,
      verify_window_code({code, {&main, 1}, reinterpret_cast<uint64_t>(slot.window.base())}));
}

confined::Code JitCache::Impl::window_code_from_verdict(WindowSlot& slot, CodeId id,
                                                        const std::string& name, uint64_t main,
                                                        const confined::Verdict& verdict) {
  if (!verdict.accepted) {
    throw Error(errc::code_refused,
                "ifunc '" + name + "': " +
                    (kHaveWindowVerifier ? "the window verifier refused its machine code: " : "") +
                    verdict.refusal);
  }
  jit::WindowMemoryMapper* const mapper = routed->mapper_of(slot.window);
  if (mapper == nullptr) throw Error(errc::jit_failed, "ifunc '" + name + "': no window mapper");
  confined::Code result{name, id, {}};
  result.windowed = std::make_unique<confined::WindowedCode>();
  confined::WindowedCode& windowed = *result.windowed;
  windowed.window = &slot.window;
  windowed.entry = {reinterpret_cast<const void*>(main), verdict.stack_bytes};
  windowed.payload = &slot.payload;
  for (const std::span<std::byte> data : mapper->writable_data())
    windowed.data.push_back({data, {}});
  windowed.remember_initial_data();
  // On top of the fault handlers again: one installed since (a test
  // framework's, an application's) that does not pass faults on would
  // otherwise take this code's traps for crashes.
  confined::install_window_traps();
  return result;
}

void JitCache::Impl::require_windows_reach_exposed(const std::string& name) {
  no_window_for_link = !windows_reach_exposed();
  if (no_window_for_link) {
    throw Error(errc::limit_exceeded, "ifunc '" + name +
                                          "': memory exposed since its load started lies "
                                          "outside every window");
  }
}

// ---- Window objects a Receiver's loads link: verified beside it ------------

bool JitCache::Impl::submit_for_verification(CodeId id, PendingLoad& pending) {
  if (!verification) {
    try {
      verification = std::make_unique<WindowVerification>(helper_cpus);
    } catch (const std::system_error&) {  // no thread to be had
      return false;
    }
  }
  const UnverifiedLink& linked = *pending.unverified;
  const uint64_t serial = next_serial++;
  verification->submit({id, serial, window_code_ranges(*linked.slot, pending.image.name),
                        linked.main, reinterpret_cast<uint64_t>(linked.slot->window.base())});
  pending.serial = serial;
  return true;
}

bool JitCache::Impl::verify_or_register(CodeId id, PendingLoad& pending) {
  const UnverifiedLink linked = *pending.unverified;
  try {
    if (submit_for_verification(id, pending)) return true;
    pending.unverified.reset();
    confined_codes[id] = window_code(*linked.slot, id, pending.image.name, linked.main);
    register_window_code(id, linked);
    return false;
  } catch (...) {
    pending.unverified.reset();
    forget_window_code(id);
    discard_window_link(linked);
    throw;
  }
}

void JitCache::Impl::register_window_code(CodeId id, const UnverifiedLink& linked) {
  dylibs[id].push_back(linked.jd);
  window_of[id] = linked.slot;
}

void JitCache::Impl::forget_window_code(CodeId id) noexcept {
  confined_codes.erase(id);
  window_of.erase(id);
  dylibs.erase(id);
}

std::optional<Error> JitCache::Impl::settle_verdict(const WindowVerification::Verified& verified,
                                                    const PendingLoad& pending,
                                                    const UnverifiedLink& linked) {
  try {
    // Exposed since it was linked, out of a window's reach: as link()
    // refuses it then, the checked tier takes it.
    require_windows_reach_exposed(pending.image.name);
    confined_codes[verified.id] = window_code_from_verdict(
        *linked.slot, verified.id, pending.image.name, linked.main, verified.verdict);
    register_window_code(verified.id, linked);
    return std::nullopt;
  } catch (const Error& error) {
    forget_window_code(verified.id);
    discard_window_link(linked);
    if (verified.target_failed) return Error(errc::jit_failed, error.what());
    return error;
  } catch (...) {
    forget_window_code(verified.id);
    discard_window_link(linked);
    throw;
  }
}

JitCache::Impl::Stored JitCache::Impl::link_stored_aside(CodeId id, PendingLoad& pending,
                                                         const std::vector<std::byte>& object,
                                                         IfuncMain& entry) {
  UnverifiedLink linked;
  entry = link_stored_object(id, pending.image, object, &linked);
  if (entry == nullptr) return Stored::refused;
  if (linked.slot == nullptr) return Stored::linked;
  pending.unverified = linked;
  pending.from_store = true;
  try {
    if (verify_or_register(id, pending)) return Stored::verifying;
  } catch (const Error&) {  // refused here (no thread): compiled instead, as one that does not link
    pending.from_store = false;
    entry = nullptr;
    return Stored::refused;
  }
  pending.from_store = false;
  return Stored::linked;
}

bool JitCache::Impl::compile_again(CodeId id, PendingLoad& pending, const Error& refusal) {
  try {
    if (pending.from_store) {
      // A stored object: compiled instead, as one that does not link, for
      // the tier the load chose.
      pending.from_store = false;
      if (pending.compile_instead) {
        workers.submit(id, std::move(*pending.compile_instead));
        pending.compile_instead.reset();
      } else {
        if (pending.image.bytes.empty()) return false;
        workers.submit(
            id, workers.prepare(pending.image.name, pending.image.bytes, pending.checked_only));
      }
    } else {
      if (pending.checked_only || pending.image.bytes.empty()) return false;
      before_checked_retry(refusal, pending.store_key);
      pending.checked_only = true;
      workers.submit(id, workers.prepare(pending.image.name, pending.image.bytes, true));
      std::vector<std::byte>().swap(pending.image.bytes);
    }
  } catch (const std::exception&) {  // no job to be had: the refusal stands
    return false;
  }
  std::vector<std::byte>().swap(pending.object_to_store);  // the refused object
  pending_loads.insert_or_assign(id, std::move(pending));
  return true;
}

LoadResult JitCache::Impl::result_of(const PendingLoad& pending, IfuncMain entry,
                                     bool from_store) const {
  return LoadResult{entry,
                    std::chrono::steady_clock::now() - pending.started,
                    pending.image.triple,
                    pending.image.name,
                    from_store,
                    1};
}

}  // namespace threechains
