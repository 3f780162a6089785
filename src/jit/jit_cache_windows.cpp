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
// What a window's memory manager reserves at a time: small, since every
// window starts with one.
constexpr std::size_t kCodeReservation = std::size_t{1} << 20;
}  // namespace

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
    furnish(slot);
  } catch (...) {
    windows.pop_back();
    window_creation_failed = true;
    throw;
  }
  no_window_for_link = false;
  return slot;
}

void JitCache::Impl::furnish(WindowSlot& slot) {
  auto mapper = std::make_unique<jit::WindowMemoryMapper>(slot.window);
  slot.mapper = mapper.get();
  slot.memory =
      std::make_unique<llvm::orc::MapperJITLinkMemoryManager>(kCodeReservation, std::move(mapper));
  slot.payload = slot.window.allocate(kPayloadArea, true);
  if (arena) arena->attach(slot.window);
}

bool JitCache::Impl::renew_window(WindowSlot& slot) noexcept {
  try {
    confined::Window fresh;  // first: if there is no address space for it, the old one stays
    slot.memory.reset();     // its reservations retired from the old window
    slot.mapper = nullptr;
    slot.payload = {};
    slot.window = std::move(fresh);
    furnish(slot);
    return true;
  } catch (...) {  // not to be reused: held, out of the spares, until the cache goes
    return false;
  }
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

confined::Code JitCache::Impl::window_code(WindowSlot& slot, CodeId id, const std::string& name,
                                           uint64_t main) {
  // The machine code as it will run: linked, relocated, read-only. The
  // window holds this code only, so this is every executable byte there.
  const std::vector<confined::CodeRange> code = slot.mapper->executable_code();
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
  confined::Code result{name, id, {}};
  result.windowed = std::make_unique<confined::WindowedCode>();
  confined::WindowedCode& windowed = *result.windowed;
  windowed.window = &slot.window;
  windowed.entry = {reinterpret_cast<const void*>(main), verdict.stack_bytes};
  windowed.payload = &slot.payload;
  for (const std::span<std::byte> data : slot.mapper->writable_data())
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

// ---- Window objects: linked and verified here, or beside this thread ------

void JitCache::Impl::dump_window_object(const std::vector<std::byte>& object,
                                        const std::string& name) {
  if (!dumper) return;
  const llvm::StringRef bytes(reinterpret_cast<const char*>(object.data()), object.size());
  auto dumped = (*dumper)(llvm::MemoryBuffer::getMemBufferCopy(bytes, name));
  if (!dumped) llvm::consumeError(dumped.takeError());  // a debugging aid: the load goes on
}

JitCache::Impl::WindowSlot& JitCache::Impl::window_for(const std::string& name,
                                                       const std::vector<std::byte>& object) {
  dump_window_object(object, name);  // first: nothing to give back if it throws
  no_window_for_link = false;
  // Exposed since the load started, out of a window's reach: the code
  // would get null where it was handed that memory.
  require_windows_reach_exposed(name);
  return acquire_window();
}

IfuncMain JitCache::Impl::link_window_here(CodeId id, const std::string& name,
                                           const std::vector<std::byte>& object) {
  WindowSlot& slot = window_for(name, object);
  jit::WindowLink linked;
  try {
    linked = jit::WindowLink::link(object, name, name + "_main", *slot.memory);
    const uint64_t main = linked.entry();
    confined_codes[id] = window_code(slot, id, name, main);
    register_window_code(id, slot, std::move(linked));
    return reinterpret_cast<IfuncMain>(main);
  } catch (...) {
    forget_window_code(id);
    discard_window_link(slot, linked);
    throw;
  }
}

IfuncMain JitCache::Impl::link_window_aside(CodeId id, PendingLoad& pending,
                                            std::vector<std::byte>& object) {
  if (!verification) {
    try {
      verification = std::make_unique<WindowVerification>(helper_cpus);
    } catch (const std::system_error&) {  // no thread to be had
      return link_window_here(id, pending.image.name, object);
    }
  }
  WindowSlot& slot = window_for(pending.image.name, object);
  const uint64_t serial = next_serial++;
  try {
    // Stored once accepted, unless it came from there.
    const bool to_store = store && !pending.store_key.empty() && !pending.from_store;
    verification->submit({id, serial, std::move(object), pending.image.name,
                          pending.image.name + "_main", slot.memory.get(), slot.mapper,
                          reinterpret_cast<uint64_t>(slot.window.base()),
                          to_store ? &*store : nullptr, to_store ? pending.store_key : ""});
  } catch (...) {
    release_window(slot);
    throw;
  }
  pending.in_window = &slot;
  pending.serial = serial;
  return nullptr;
}

void JitCache::Impl::discard_window_link(WindowSlot& slot, jit::WindowLink& linked) noexcept {
  if (linked.linked()) {
    // A window whose code could not all be unlinked is given to no other
    // code (as evict() keeps it): held until the cache goes.
    if (linked.unlink()) release_window(slot);
    return;
  }
  // A link that failed, perhaps after it was given memory there: LLVM 22's
  // MapperJITLinkMemoryManager abandons such an allocation without ever
  // handing its range out again, so an object with huge zero-initialised
  // data and one import would leave the window too full for the next code
  // (an attacker review, 2026-11-29). The window is renewed instead.
  if (renew_window(slot)) release_window(slot);
}

void JitCache::Impl::register_window_code(CodeId id, WindowSlot& slot, jit::WindowLink&& linked) {
  const uint64_t key = function_key(slot);
  try {
    for (const auto& [begin, function] : linked.functions()) functions.add(key, begin, function);
    window_of[id] = &slot;
  } catch (...) {
    functions.forget(key);
    throw;
  }
  slot.code = std::move(linked);
}

void JitCache::Impl::forget_window_code(CodeId id) noexcept {
  confined_codes.erase(id);
  if (const auto it = window_of.find(id); it != window_of.end()) {
    functions.forget(function_key(*it->second));
    window_of.erase(it);
  }
}

std::optional<Error> JitCache::Impl::settle_verdict(WindowVerification::Verified& verified,
                                                    const PendingLoad& pending, WindowSlot& slot) {
  if (verified.link_error) {     // errc::jit_failed, whoever failed
    no_window_for_link = false;  // a window was had: the object did not link there
    discard_window_link(slot, verified.link);
    return std::move(verified.link_error);
  }
  try {
    // Exposed since it was linked, out of a window's reach: as link()
    // refuses it then, the checked tier takes it.
    require_windows_reach_exposed(pending.image.name);
    const uint64_t main = verified.link.entry();
#if defined(__aarch64__)
    // Written, and the instruction cache cleaned, on tc-verify's core; this
    // core must synchronise its context before it runs what was written
    // there (Arm ARM, cross-modifying code: an ISB on the executing PE).
    asm volatile("isb" ::: "memory");
#endif
    confined_codes[verified.id] =
        window_code_from_verdict(slot, verified.id, pending.image.name, main, verified.verdict);
    register_window_code(verified.id, slot, std::move(verified.link));
    return std::nullopt;
  } catch (const Error& error) {
    forget_window_code(verified.id);
    discard_window_link(slot, verified.link);
    if (verified.target_failed) return Error(errc::jit_failed, error.context());
    return error;
  } catch (...) {
    forget_window_code(verified.id);
    discard_window_link(slot, verified.link);
    throw;
  }
}

JitCache::Impl::Stored JitCache::Impl::link_stored_aside(CodeId id, PendingLoad& pending,
                                                         std::vector<std::byte> object,
                                                         IfuncMain& entry) {
  if (!(window_tier && claims_window_shape(object))) {
    entry = link_stored_object(id, pending.image, object);
    return entry == nullptr ? Stored::refused : Stored::linked;
  }
  pending.from_store = true;
  try {
    entry = link_window_aside(id, pending, object);
  } catch (
      const Error&) {  // no window, or refused here: compiled instead, as one that does not link
    pending.from_store = false;
    entry = nullptr;
    return Stored::refused;
  }
  if (entry == nullptr) return Stored::verifying;
  pending.from_store = false;
  return Stored::linked;
}

bool JitCache::Impl::compile_again(CodeId id, PendingLoad& pending, const Error& refusal) {
  try {
    if (pending.from_store) {
      // A stored object: compiled instead, as one that does not link, for
      // the tier the load chose.
      pending.from_store = false;
      if (pending.image.bytes.empty()) return false;
      workers.submit(
          id, workers.prepare(pending.image.name, pending.image.bytes, pending.checked_only));
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
