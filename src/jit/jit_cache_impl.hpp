// JitCache's state (the pimpl), for the files that implement it:
//   jit_cache.cpp          the cache: its set-up and the calls of JitCache;
//   jit_cache_imports.cpp  what injected code's imports bind to (the
//                          process, dependency libraries), through the ImportPolicy;
//   jit_cache_linking.cpp  code into JITDylibs: linked, from the store, pre-linked,
//                          confined, evicted;
//   jit_cache_tiers.cpp    tiered code: tier 0 at once, tier 1 compiled later;
//   jit_cache_windows.cpp  the window tier of confined code: a window per code, verified.
// Private to the library: LLVM's types stay out of the public headers.
#pragma once

#include "confine/exposure.hpp"
#include "confine/runtime.hpp"
#include "confine/window.hpp"
#include "jit/background_compiler.hpp"
#include "jit/bitcode_checks.hpp"
#include "jit/compile_worker.hpp"
#include "jit/confined_preparation.hpp"
#include "jit/container_images.hpp"
#include "jit/function_table.hpp"
#include "jit/host_description.hpp"
#include "jit/host_optimiser.hpp"
#include "jit/image_memory.hpp"
#include "jit/jit_observers.hpp"
#include "jit/object_store.hpp"
#include "jit/prelinked_image.hpp"
#include "jit/process_symbols.hpp"
#include "jit/window_link.hpp"
#include "jit/window_memory.hpp"
#include "jit/window_verification.hpp"

#include <threechains/runtime.h>
#include <threechains/error.hpp>
#include <threechains/jit_cache.hpp>

#include "trust/sodium.hpp"

#include <functional>

#include <llvm-c/Core.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/DebugUtils.h>
#include <llvm/ExecutionEngine/Orc/EHFrameRegistrationPlugin.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/MemoryMapper.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/ObjectTransformLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>

#include <dlfcn.h>
#include <link.h>
#include <sodium.h>

#include <algorithm>
#include <array>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <optional>

namespace threechains {

// Hidden: JitCache's own helpers, shared by its files, never part of the
// library's ABI.
#pragma GCC visibility push(hidden)
namespace jit_cache_detail {

inline std::string message_of(llvm::Error error) {
  return llvm::toString(std::move(error));
}

// What went wrong while loading one ifunc, gathered from every LLVM error the
// load produced (the session's error reporter and the final lookup).
struct LoadFailure {
  errc code = errc::jit_failed;
  std::string message;
  bool needs_native_tls = false;
  std::vector<std::string> refused;  // imports the ImportPolicy turned away somewhere
  std::vector<std::string> missing;  // what the link could not resolve in the end

  // The one place LLVM's errors become ours: classified by their type.
  void absorb(llvm::Error error) {
    llvm::handleAllErrors(
        std::move(error),
        [this](const llvm::orc::SymbolsNotFound& not_found) {
          code = errc::symbol_not_found;
          for (const llvm::orc::SymbolStringPtr& name : not_found.getSymbols()) {
            // Native TLS resolves through the ORC runtime's TLS entry points.
            const llvm::StringRef symbol = *name;
            missing.push_back(symbol.str());
            if (symbol.contains("_TLS") || symbol == "__tls_get_addr") needs_native_tls = true;
          }
          append(not_found.message());
        },
        [this](const llvm::ErrorInfoBase& other) {
          // JITLink refuses native TLS relocations (R_X86_64_TLSGD, ...) by name.
          const std::string text = other.message();
          if (llvm::StringRef(text).contains("TLS")) needs_native_tls = true;
          append(text);
        });
  }

  void append(const std::string& text) { message += (message.empty() ? "" : "; ") + text; }
  [[nodiscard]] bool empty() const noexcept { return message.empty(); }
};

inline std::string hex_id(CodeId id) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, id >>= 4) s[static_cast<std::size_t>(i)] = digits[id & 0xf];
  return s;
}

// <threechains/runtime.h>: what injected code of any kind may call here
// (src/runtime/), by name and address.
const std::array<std::pair<const char*, void*>, 6>& public_runtime();

}  // namespace jit_cache_detail
#pragma GCC visibility pop

using jit_cache_detail::hex_id;
using jit_cache_detail::LoadFailure;
using jit_cache_detail::message_of;
using jit_cache_detail::public_runtime;

// Hidden, as its helpers above: the pimpl is no part of the ABI.
struct __attribute__((visibility("hidden"))) JitCache::Impl {
  explicit Impl(const JitOptions& options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Whether injected code may import `name` from this process: by name, or
  // because an allowed library defines it. A refusal is remembered so the
  // load's error names the symbol (a symbol the process lacks is just missing).
  bool allow_process_symbol(llvm::StringRef name);

  // Whether `symbol` may be bound to `address` (what the generator at hand
  // would bind): allowed by name, or defined by an allowed object.
  bool allow_binding(const std::string& symbol, const void* address);

  // A dependency library becomes a JITDylib of its own, shared by every ifunc
  // that names it. Only what the library itself defines resolves there: dlsym
  // on a library also finds what its own dependencies (libc) define, which
  // must go through the policy like any process symbol.
  llvm::orc::JITDylib& dependency(const std::string& library, const std::string& ifunc);

  // A dependency library, loaded for good: LLVM's handle (what its generator
  // searches) and ours, with its link_map to tell its own symbols from those
  // of its dependencies.
  struct DependencyObject {
    llvm::sys::DynamicLibrary library;
    void* handle = nullptr;
    const link_map* self = nullptr;
  };

  // Whether `symbol`, found at `address` by a search of `object`, may bind:
  // the library's own symbols may; what its dependencies (libc) define goes
  // through the policy like any process symbol.
  bool allow_from(const DependencyObject& object, const std::string& symbol, const void* address);

  const DependencyObject& dependency_object(const std::string& library, const std::string& ifunc);

  // Maps a pre-linked image (prelinked_image.hpp): no JIT, no linker. Its
  // imports resolve in the JIT's order (a JITDylib's link order: LLJIT's
  // process JITDylib, then the dependencies): the runtime, the process,
  // then its dependency libraries, each through the ImportPolicy.
  IfuncMain link_prelinked(CodeId id, const ParsedImage& image);

  // Forgets `id`'s pre-linked image, if it has one.
  bool release_prelinked(CodeId id);

  // The store's key for `image`: the code's identity (and, since XXH3 is no
  // cryptographic hash, the image's BLAKE2b), and everything of this host and
  // build that decides the object's bytes or what was checked before
  // (`window_shape`: whether the worker was asked for the window shape).
  [[nodiscard]] std::string store_key(CodeId id, const ParsedImage& image,
                                      Confine confine = Confine::no,
                                      bool window_shape = false) const;

  // The entry of `image` (IR) linked from the store under `key`, or nullptr.
  IfuncMain link_stored(CodeId id, const ParsedImage& image, const std::string& key,
                        Confine confine = Confine::no);

  // Compiles or links `image`; with a store, bitcode is first looked up there.
  IfuncMain load(CodeId id, CodecId codec, const ParsedImage& image, bool& from_store,
                 Confine confine = Confine::no);

  // Confined bitcode: from the store, else compiled by a worker process
  // (compile_worker.hpp) while this thread waits, then linked here.
  IfuncMain load_confined(CodeId id, const ParsedImage& image, bool& from_store);

  // Links what a worker compiled for `image` (or throws why it did not) and
  // keeps it in the store under `key`, if there is one.
  IfuncMain link_compiled(CodeId id, const ParsedImage& image, CompileWorkers::Outcome& compiled,
                          const std::string& key);

  // A tiered load: the object at once (tier 0) and the IR compiled later, or
  // what JitOptions::tiering asks for; `object` or `ir` may be missing.
  IfuncMain load_tiered(CodeId id, const ParsedImage* object, const ParsedImage* ir,
                        LoadResult& result);

  struct Promotion {
    uint64_t serial = 0;
    uint32_t calls_left = 0;
    bool due = false;  // called often enough: to be submitted (start_due_compiles)
    bool submitted = false;
    ParsedImage ir;  // its bytes go to the compiler; name, triple and deps stay
    std::string store_key;
  };

  void submit(CodeId id, Promotion& promotion);

  void note_call(CodeId id);

  // Forgets `id`'s promotion (a compile under way is dropped when it finishes).
  void drop_promotion(CodeId id);

  void start_due_compiles();

  // Links finished tier-1 code; returns the new entries and what failed.
  std::vector<std::pair<CodeId, IfuncMain>> promote_ready(std::vector<std::string>& failures,
                                                          unsigned& kept_at_tier0);

  struct WindowSlot;   // below, with the window tier
  struct PendingLoad;  // below, with the loads finished beside the caller

  // Links `image` (or, for bitcode, `object` compiled from it earlier) into a
  // JITDylib of its own and returns its entry point; a confined object of
  // the window shape goes into a window instead (link_window_here).
  IfuncMain link(CodeId id, CodecId codec, const ParsedImage& image,
                 const std::vector<std::byte>* object, Confine confine = Confine::no);
  // Unlinks `linked` (a refused object's, or one whose load was cancelled
  // while it was linked and verified) and gives `slot` back, unless its
  // memory could not be: then it holds no other code until the cache goes.
  void discard_window_link(WindowSlot& slot, jit::WindowLink& linked) noexcept;

  // What the runner needs of a confined ifunc just linked into `jd`: its
  // globals, from the table the confinement pass emitted.
  confined::Code confined_code(llvm::orc::JITDylib& jd, CodeId id, const std::string& name);

  // The window tier (ConfinementOptions::window_tier; jit_cache_windows.cpp).
  // A window holds one code at a time, linked by JITLink alone
  // (jit/window_link.hpp) with the window's own memory manager: no ORC
  // session, so the link can run beside this thread (WindowVerification).
  struct WindowSlot {
    confined::Window window;
    // Links into `window` (declared after it, so it goes first).
    std::unique_ptr<llvm::jitlink::JITLinkMemoryManager> memory;
    jit::WindowMemoryMapper* mapper = nullptr;  // owned by `memory`
    std::span<std::byte> payload;               // where its invocations' payloads are copied
    jit::WindowLink code;                       // what is linked there once taken; unlinked first
  };
  // The function table's key for what is linked in `slot`: an address in
  // the window, which no ORC resource key (a heap object's) can be.
  [[nodiscard]] static uint64_t function_key(const WindowSlot& slot) noexcept {
    return reinterpret_cast<uint64_t>(slot.window.base());
  }
  // The window a window object for `name` goes into (dumped first, as
  // JitOptions::dump_objects_to asks). Throws errc::limit_exceeded, with
  // no_window_for_link set, when none is to be had for it: all held, none
  // could be made, or what is exposed by address lies out of its reach.
  [[nodiscard]] WindowSlot& window_for(const std::string& name,
                                       const std::vector<std::byte>& object);
  // A window object linked here and verified here, registered: the
  // synchronous load's way (JitCache::load), and finish_loads' where no
  // thread can be had for it.
  [[nodiscard]] IfuncMain link_window_here(CodeId id, const std::string& name,
                                           const std::vector<std::byte>& object);
  // A window object for `pending` linked and verified beside this thread:
  // a window is taken for it and `object` is moved to `verification`
  // (nullptr returned; pending.in_window set, the link and its verdict to
  // come in take_verdicts; the object stored by that thread once the
  // verifier accepts it, if pending has a store key). Where no thread can be
  // had, link_window_here's entry, `object` left as it was. Throws what
  // window_for throws.
  [[nodiscard]] IfuncMain link_window_aside(CodeId id, PendingLoad& pending,
                                            std::vector<std::byte>& object);
  // Objects dumped as ORC's transform layer dumps the rest (JitOptions::dump_objects_to).
  void dump_window_object(const std::vector<std::byte>& object, const std::string& name);
  // A window for one code: a spare one, else a new one (errc::limit_exceeded
  // past max_windows).
  WindowSlot& acquire_window();
  // Gives `slot` (its window reserved) its memory manager and payload
  // area, and maps the arena into it.
  void furnish(WindowSlot& slot);
  // `slot`'s window replaced by a fresh one, furnished again, after a link
  // there failed (discard_window_link); nothing may be linked there. False
  // if no fresh one could be had: the slot is then not to be reused.
  [[nodiscard]] bool renew_window(WindowSlot& slot) noexcept;
  // Back to the spares, its payload copy dropped. What was linked there
  // must be unlinked first (WindowLink::unlink: its pages replaced by
  // inaccessible ones), and a window whose code could not be is not
  // given back.
  void release_window(WindowSlot& slot) noexcept;
  // Whether a compiled confined object claims the window shape: it defines
  // no confined globals table (the checked pass always emits one). A claim
  // the code cannot back is refused by the verifier.
  [[nodiscard]] static bool claims_window_shape(const std::vector<std::byte>& object);
  // Whether a worker's outcome is an object for the window tier: if its
  // link or the verifier refuses it, the code is compiled again for the
  // checked tier instead of being lost (the compiler is as trusted there as
  // it ever was; only the window tier does without it).
  [[nodiscard]] bool window_object(const CompileWorkers::Outcome& compiled) const {
    return window_tier && !compiled.error && claims_window_shape(compiled.object);
  }
  // Whether window code could reach every region exposed by address: each
  // lies in the arena (one outside it, ReceiverOptions::exposed or a
  // target_args not from allocate_exposed, reads as unmapped in a window,
  // so code that may use it belongs in the checked tier).
  [[nodiscard]] bool windows_reach_exposed() const noexcept {
    for (const ExposedRegion& region : exposed_by_address)
      if (!arena || !arena->contains(region.bytes.data(), region.bytes.size())) return false;
    return true;
  }
  // Whether every window is held, or the last one asked for could not be
  // made (no address space for it: a 39-bit address space, RLIMIT_AS), and
  // none has been given back since.
  [[nodiscard]] bool out_of_windows() const noexcept {
    return spare_windows.empty() && (windows.size() >= max_windows || window_creation_failed);
  }
  // Whether a load starting now asks the worker for the window shape: the
  // tier is here, window code could reach what is exposed, and a window is
  // to be had (else the load would compile twice).
  [[nodiscard]] bool windows_for_new_loads() const noexcept {
    return window_tier && windows_reach_exposed() && !out_of_windows();
  }
  // After link() refused a window object, before the code is compiled
  // again for the checked tier. When no window was to be had for it
  // (`no_window_for_link`: all held, none could be made, or what is exposed
  // changed since the load started and window code could not reach it),
  // `store_key` is cleared: the checked object stored under the window
  // tier's key would keep the code from a window once one is free. Any
  // other refusal (the verifier's, the window's link) is the code's:
  // counted, and kept for window_refusals().
  void before_checked_retry(const Error& refusal, std::string& store_key) {
    if (no_window_for_link) {
      store_key.clear();
      return;
    }
    ++window_refusal_count;
    last_window_refusal = refusal.what();
  }
  uint64_t window_refusal_count = 0;
  std::string last_window_refusal;
  // What the runner needs of code linked into `slot` with entry `main`,
  // once the verifier accepted it (errc::code_refused, naming the rule, if not).
  confined::Code window_code(WindowSlot& slot, CodeId id, const std::string& name, uint64_t main);
  // The same for a verdict reached elsewhere (WindowVerification): what
  // the runner needs once `verdict` is in, or why not.
  confined::Code window_code_from_verdict(WindowSlot& slot, CodeId id, const std::string& name,
                                          uint64_t main, const confined::Verdict& verdict);
  // Throws errc::limit_exceeded (no_window_for_link set) while something
  // exposed by address lies out of every window's reach: code loaded since
  // it was exposed would get null there.
  void require_windows_reach_exposed(const std::string& name);
  // The exposed regions the checked tier sees: the application's and the arena's.
  void expose_all();

  // A JITDylib for one ifunc's code (each its own, so helper symbols of two
  // ifuncs never clash): an emptied one if there is one, else a new one.
  // Making one costs more than linking a small object (threechains-bench-jit,
  // perf), so evicted ones are emptied and kept.
  llvm::orc::JITDylib& acquire_dylib();

  // Empties `jd` for reuse (or removes it, if emptying fails).
  llvm::Error release_dylib(llvm::orc::JITDylib& jd);

  // Whether code for `image_triple` runs on this host: LLVM parses both
  // triples the first time a container names it (a fifth of a pre-linked
  // load, cold), and the answer is kept.
  bool runs_here(const std::string& image_triple);

  bool evict(CodeId id);

  ImportPolicy policy;
  confined::Runner runner;  // before the JIT: its state is bound into every JITDylib
  CompileWorkers workers;   // where confined bitcode compiles
  detail::HelperCpus helper_cpus;  // JitOptions::helper_cpus: where the JobThreads run
  // The window tier: on where this build has a verifier (x86-64 with
  // Zydis, aarch64) and the options ask for it (the default); each load
  // asks windows_for_new_loads() whether it may take it. Its windows (each
  // with its memory manager and linked code: see WindowSlot) are reused
  // after evictions, and the arena is mapped into each. They are declared
  // before the codes that point at them, and outlive `verification`,
  // whose thread links into them (~Impl stops it first).
  bool window_tier = false;
  std::size_t max_windows = 0;  // ConfinementOptions::max_windows
  // The last Window asked for could not be made; cleared when one is given back.
  bool window_creation_failed = false;
  // The last window_for() found no window (before_checked_retry).
  bool no_window_for_link = false;
  std::deque<WindowSlot> windows;
  std::vector<WindowSlot*> spare_windows;
  std::unordered_map<CodeId, WindowSlot*>
      window_of;  // windowed codes' slots (their link in `code`)
  std::optional<confined::ExposureArena> arena;       // made by the first allocate_exposed
  std::vector<ExposedRegion> exposed_by_address;      // JitCache::expose
  std::vector<ExposedRegion> exposed_in_arena;        // JitCache::allocate_exposed
  struct PendingLoad {
    ParsedImage image;  // name, triple and deps; its bytes where a second compile may need them
    std::string store_key;
    std::chrono::steady_clock::time_point started;
    bool preparing = false;  // still with `preparation`: image and store_key not yet known
    uint64_t serial =
        0;  // the preparation's while `preparing`, the verification's while `in_window`
    // Compiling for the checked tier only: windows_for_new_loads() said no
    // when it started, or a window object was refused (before_checked_retry).
    bool checked_only = false;
    // With `verification`, to be linked into this window and verified
    // (its serial in `serial`); whether that object came from the store
    // (a refused one is then compiled from image.bytes).
    WindowSlot* in_window = nullptr;
    bool from_store = false;
  };
  // Confined loads under way: prepared beside the caller, compiling in a
  // worker, or linked into a window and with the verifier.
  std::unordered_map<CodeId, PendingLoad> pending_loads;
  // `linked`, now verified, kept in `slot` for `id`: findable by id, its
  // functions in the table.
  // `linked` is moved from only if it is kept: whatever this throws, the
  // caller still holds it, to discard it (discard_window_link).
  void register_window_code(CodeId id, WindowSlot& slot, jit::WindowLink&& linked);
  // Undoes what register_window_code and confined_codes hold for `id`.
  void forget_window_code(CodeId id) noexcept;
  // A verdict for `pending`'s link in `slot`: registered (nullopt), or the
  // link undone and why it was not taken.
  [[nodiscard]] std::optional<Error> settle_verdict(WindowVerification::Verified& verified,
                                                    const PendingLoad& pending, WindowSlot& slot);
  // What a stored object for a confined load came to: linked and
  // registered (`entry` set), with the verifier (pending.in_window), or
  // not to be used (it does not link, or no window is to be had for it).
  enum class Stored { linked, verifying, refused };
  [[nodiscard]] Stored link_stored_aside(CodeId id, PendingLoad& pending,
                                         std::vector<std::byte> object, IfuncMain& entry);
  // After a window object was not taken for `pending`: a stored one is
  // compiled instead; a compiled one compiled again for the checked tier,
  // once (before_checked_retry), while the bitcode is at hand. True if a
  // compile started (the load pending again), false if the refusal stands.
  bool compile_again(CodeId id, PendingLoad& pending, const Error& refusal);
  [[nodiscard]] LoadResult result_of(const PendingLoad& pending, IfuncMain entry,
                                     bool from_store) const;
  // Windows of cancelled loads whose link and verdict are still to come,
  // by serial: given back when they come, not before (the thread links
  // into them and reads them).
  std::unordered_map<uint64_t, WindowSlot*> abandoned_links;
  // A cancelled load's window, if it has one, waits in abandoned_links.
  void abandon(const PendingLoad& pending) noexcept {
    if (pending.in_window == nullptr) return;
    try {
      abandoned_links.emplace(pending.serial, pending.in_window);
    } catch (...) {  // no memory for the record: its window stays held until the cache goes
    }
  }
  // `runs_here` says whether an image's triple runs on this host.
  using RunsHere = std::function<bool(const std::string&)>;
  [[nodiscard]] std::vector<ParsedImage> images_for_host(CodeId id, std::span<const std::byte> code,
                                                         const ParsedImage*& object,
                                                         const ParsedImage*& ir,
                                                         const RunsHere& runs_here) const;
  [[nodiscard]] std::vector<ParsedImage> images_for_host(CodeId id, std::span<const std::byte> code,
                                                         const ParsedImage*& object,
                                                         const ParsedImage*& ir) {
    return images_for_host(id, code, object, ir,
                           [this](const std::string& image) { return runs_here(image); });
  }
  // On the preparation thread: reads only what is set at construction
  // (triple, host_key, store, workers' settings).
  void prepare_confined(ConfinedPreparation::Job& job, ConfinedPreparation::Prepared& out) const;
  // Links `object` (from the store) for confined `image`; null if it does
  // not link here.
  IfuncMain link_stored_object(CodeId id, const ParsedImage& image,
                               const std::vector<std::byte>& object);
  [[nodiscard]] static const ParsedImage& confinable(CodecId codec, const ParsedImage* object,
                                                     const ParsedImage* ir);
  std::unordered_map<CodeId, confined::Code> confined_codes;  // node-based: stable for CachedIfunc
  LibraryCalls calls;  // what optimised code may call: shared with the background compiler
  std::unique_ptr<HostOptimiser> optimiser;
  // Before the JIT: its plugins write to these.
  jit::FunctionTable functions;  // what fault reports name an instruction after
  jit::Observers observers;      // the perf session
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::string triple;
  std::unordered_map<std::string, bool> runs_on_host;  // image triple -> runs_here
  LoadFailure failure;               // what the session reported during the current load
  std::optional<ObjectStore> store;  // JitOptions::code_cache_directory
  std::string host_key;              // this host's part of a store key
  std::optional<llvm::orc::DumpObjects> dumper;
  bool capturing = false;           // a compile for the store is running
  std::vector<std::byte> captured;  // the object it produced
  int captured_objects = 0;
  std::optional<llvm::orc::JITTargetMachineBuilder> host_builder;  // for the background compiler
  int optimisation_level = 2;
  Tiering tiering = Tiering::tiered;
  uint32_t promote_after_calls = 2;
  std::unordered_map<CodeId, Promotion> promotions;  // tier-0 ifuncs with IR to compile
  std::vector<CodeId> due;                           // promotions to submit (start_due_compiles)
  std::size_t awaiting = 0;                          // promotions waiting for calls
  std::size_t in_progress = 0;                       // due, submitted or compiled, not yet linked
  uint64_t next_serial = 1;
  std::unique_ptr<BackgroundCompiler> compiler;  // started by the first promotion
  std::unordered_map<CodeId, std::vector<llvm::orc::JITDylib*>> dylibs;  // tier 0 first
  std::vector<llvm::orc::JITDylib*> spare_dylibs;  // emptied by evictions, for reuse
  llvm::orc::JITDylibSearchOrder default_links;    // LLJIT's links of a new JITDylib
  std::size_t dylib_count = 0;
  std::unordered_map<std::string, llvm::orc::JITDylib*> dependencies;    // live as long as the JIT
  std::unordered_map<std::string, DependencyObject> dependency_objects;  // loaded for good
  // Pre-linked images (binary code packed PRELINKED), released on eviction
  // into image_memory, which is declared first so it outlives them.
  jit::ImageMemory image_memory;
  std::unordered_map<CodeId, jit::PrelinkedImage> prelinked;
  // Last: their threads read the members above, and are stopped before they go.
  std::unique_ptr<ConfinedPreparation> preparation;  // started by the first confined start_load
  std::unique_ptr<WindowVerification>
      verification;  // started by the first window object finish_loads hands it
};

}  // namespace threechains
