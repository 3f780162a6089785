// JitCache: the target's cache of callable ifuncs, keyed by code identity.
// Loading compiles bitcode with ORC for this host's CPU, or links a relocatable
// object with JITLink; each ifunc lives in its own JITDylib with its own
// ResourceTracker, so helper symbols of two ifuncs never clash and evicting one
// frees its code. LLVM stays behind the pimpl.
#pragma once

#include <threechains/confinement.hpp>
#include <threechains/error.hpp>
#include <threechains/frame.hpp>
#include <threechains/ifunc.hpp>  // IfuncMain
#include <threechains/import_policy.hpp>
#include <threechains/trust.hpp>  // Confine

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace threechains {

namespace confined {
struct Code;  // what the runtime knows of a loaded confined ifunc
}

// A loaded ifunc as a dispatch loop runs it (JitCache::invoke).
struct CachedIfunc {
  IfuncMain main = nullptr;
  const confined::Code* confined = nullptr;  // set: it runs confined (confinement.hpp)
  // Set: a GPU kernel (the Receiver's GPU executor runs it; gpu.hpp), and the
  // CPU image's <name>_complete, run on the host after it, if it has one.
  // Both belong to the Receiver's engine, which evicts them together.
  const void* gpu = nullptr;
  IfuncMain gpu_complete = nullptr;
};

// What a target runs of a tiered container (both an object and IR per triple).
enum class Tiering : uint8_t {
  tiered,       // the object at once (tier 0), the IR compiled in the background (tier 1)
  object_only,  // the object; IR only where there is no object
  ir_only,      // the IR, compiled before the first call; the object only where there is no IR
};

struct JitOptions {
  // The middle-end pipeline run on bitcode before code generation, with this
  // host's CPU and features (so the vectorisers see its vector width):
  // 0 none, 1..3 LLVM's O1..O3.
  int optimisation_level = 2;
  // Codegen level for bitcode: 0 none, 1 less, 2 default, 3 aggressive.
  int codegen_level = 2;
  // If set, every object the JIT links is also written to this directory
  // (for disassembly: what the host really runs).
  std::string dump_objects_to;
  // Opt-in persistent code cache: objects compiled from bitcode are kept in
  // this directory, keyed by code identity, this host's CPU and features, the
  // LLVM version and the levels above, so a restarted target links instead of
  // compiling. Corrupt or foreign entries are ignored and replaced. The
  // directory is created (0700) if absent and must be private to this user
  // (its entries run as native code): otherwise constructing the cache throws.
  std::string code_cache_directory;
  // Tiered containers: which tier runs, and when tier 1 is compiled: once the
  // tier-0 code has run this many times (0: as soon as it is loaded). Code
  // called fewer times never pays for a compile: 2 by default, so code sent
  // to run once (a control message) costs a link and nothing more. A compile
  // runs at nice 10 beside the dispatch loop, and still leaves the caches
  // cold for what runs next (a JITLink load right after a compile: 84 us,
  // against 28 us back to back; threechains-bench-jit --compile-between,
  // docs/performance.md).
  Tiering tiering = Tiering::tiered;
  uint32_t promote_after_calls = 2;
  // How confined code (Confine::yes) is bounded: time, stack.
  ConfinementOptions confinement;
  // What injected code may import (symbols, dependency libraries); checked
  // when it is linked, before any of it runs. Default: the safe set.
  ImportPolicy imports;
  // Debuggers and profilers see JIT'd ifuncs (docs/observability.md), each
  // also turned on by its environment variable, =1:
  // THREECHAINS_JIT_DEBUG: every linked object is registered through GDB's JIT
  // interface, so `break counter_main` works in gdb (a copy per load: costs).
  bool debugger_support = false;
  // THREECHAINS_JIT_PERF: function names and code go to a perf jitdump file
  // ($JITDUMPDIR/.debug/jit/..., else ~/.debug/jit/...), so `perf record -k 1`
  // + `perf inject --jit` + `perf report` name them.
  bool perf_support = false;
  // The CPUs the library's helpers run on: the compile workers of confined
  // code and the threads beside the one that serves frames (the tier-1
  // compiler, the preparation of confined code, the checks of large or
  // confined code, the window
  // verifier). Empty (the default): where they start, on the CPUs of the
  // thread that starts them, the serving thread. A serving thread bound to
  // one core (mpirun --bind-to core, srun --cpu-bind, taskset) binds them
  // to it too, and a confined compile then takes all its CPU time out of
  // that core: name a spare core here. The kernel keeps them within the
  // process's cpuset; nice 10 weighs only within their autogroup or cgroup
  // (docs/design.md, "Where the helpers run"). An id outside
  // 0..CPU_SETSIZE-1 makes constructing the cache throw.
  std::vector<int> helper_cpus;
};

struct LoadResult {
  IfuncMain entry = nullptr;
  std::chrono::nanoseconds compile_time{0};  // parse + compile/link + lookup
  std::string triple;                        // the image chosen for this host
  std::string name;                          // the ifunc's name
  bool from_code_cache = false;  // linked from JitOptions::code_cache_directory, not compiled
  // 0: the shipped object, compiled for the triple's baseline CPU; 1: compiled
  // here, for this CPU. A tiered load at 0 is promoted later (promote_ready).
  int tier = 0;
};

// What promote_ready() did: ifuncs now running their tier-1 code, and tier-1
// compiles that failed (those keep running tier 0).
struct Promotions {
  unsigned promoted = 0;
  unsigned stay_at_tier0 = 0;  // code with writable globals: tier 1 would lose their state
  std::vector<std::string> failures;
};

class JitCache {
 public:
  explicit JitCache(const JitOptions& options = {});
  ~JitCache();
  JitCache(const JitCache&) = delete;
  JitCache& operator=(const JitCache&) = delete;
  JitCache(JitCache&&) noexcept;
  JitCache& operator=(JitCache&&) noexcept;

  // Hot path: the ifunc loaded as `id`, or nullptr if it is not cached. Run
  // it with invoke(): confined code needs its runner around each call.
  [[nodiscard]] const CachedIfunc* find_ifunc(CodeId id) const noexcept {
    const auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
  }
  // The entry point of unconfined CPU code loaded as `id` (to call
  // directly), or nullptr if it is not cached, runs confined or on a GPU.
  [[nodiscard]] IfuncMain find(CodeId id) const noexcept {
    const CachedIfunc* ifunc = find_ifunc(id);
    return ifunc == nullptr || ifunc->confined != nullptr || ifunc->gpu != nullptr ? nullptr
                                                                                   : ifunc->main;
  }
  // Runs a cached ifunc on `payload`. nullopt: it returned; a trap: confined
  // code broke a rule and was stopped there (nothing of it runs on).
  // `caller` says whom confined code runs for (a Receiver passes each peer
  // key's own number): its data stack and writable globals are never
  // carried from one caller to the next (wiped, and set back to how the
  // code was loaded), so what one peer's invocation left there no other
  // peer's reads.
  std::optional<ConfinedTrap> invoke(const CachedIfunc& ifunc, void* payload, std::size_t size,
                                     void* target_args, uint64_t caller = 0) noexcept {
    if (ifunc.confined == nullptr) [[likely]] {
      ifunc.main(payload, size, target_args);
      return std::nullopt;
    }
    return invoke_confined(ifunc, payload, size, target_args, caller);
  }
  // Runs a cached ifunc on each of `payloads`, in order, for one caller:
  // what invoke() on each would do, in fewer steps where the code runs in
  // the window tier (one way into the window for several of them; each
  // call still under its own time budget). Returns payloads.size() unless
  // `trap` is set; then how many returned before payloads[returned]
  // trapped, and none after it ran. A trap with none returned may also be
  // a refusal before any call (too little stack on this thread).
  [[nodiscard]] std::size_t invoke_each(const CachedIfunc& ifunc,
                                        std::span<const IfuncPayload> payloads, void* target_args,
                                        std::optional<ConfinedTrap>& trap,
                                        uint64_t caller = 0) noexcept;
  // Memory confined code loaded as `id` holds beyond its container: its
  // globals and the copy of their initial values (0 if not confined); for
  // the window tier, also its payload area, which grows with the largest
  // payload it was given.
  [[nodiscard]] std::size_t committed_bytes(CodeId id) const noexcept;
  // The name of a cached confined ifunc, for reports ("" if not confined).
  [[nodiscard]] std::string confined_name(const CachedIfunc& ifunc) const;
  // Regions of this process that confined code may use (replaces the last set).
  // While one lies outside allocate_exposed memory, confined code that
  // loads takes the checked tier (window code could not reach it); code
  // loaded into windows before stays there, and cannot.
  void expose(const std::vector<ExposedRegion>& regions);
  // Memory that confined code of both tiers may use, the window tier
  // without a copy (ConfinementOptions::window_tier): `bytes` of zeroed
  // memory (whole pages), writable by confined code if `writable`, owned by
  // this cache and valid while it lives (never freed before). Pointers
  // into it (as target_args, or in a payload) mean the same memory to
  // window code. Every confined ifunc of either tier may use every piece:
  // there is no isolation between callers inside it. `name` is for
  // reports. expose() does not replace these. Not while the Receiver's
  // progress thread runs (it remaps every window). Throws
  // Error(errc::limit_exceeded) past 2 GiB in all, or when the process
  // has no memfd or address space (8 GiB for the host's view) left.
  [[nodiscard]] std::span<std::byte> allocate_exposed(const std::string& name, std::size_t bytes,
                                                      bool writable);
  // Whether a cached confined ifunc runs in the window tier.
  [[nodiscard]] bool in_window(const CachedIfunc& ifunc) const noexcept;
  // Window objects the verifier (or the window's link) refused, each then
  // compiled again for the checked tier, and the last refusal, naming the
  // rule: honest code should make none, so any is worth a look (a compiler
  // that emits what the verifier cannot check, or one that was tampered
  // with).
  struct WindowRefusals {
    uint64_t count = 0;
    std::string last;
  };
  [[nodiscard]] WindowRefusals window_refusals() const;
  // The JIT'd function holding `address` (an instruction of injected code),
  // and `offset` into it; nullptr if none. Allocation- and lock-free: a
  // signal handler on the thread that uses this cache may ask while an ifunc
  // runs there (fault reports do); not from another thread while this one
  // loads or evicts.
  [[nodiscard]] const std::string* function_at(const void* address,
                                               std::uintptr_t& offset) const noexcept;
  [[nodiscard]] bool contains(CodeId id) const noexcept { return entries_.contains(id); }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

  // Verifies that `code` hashes to `id`, picks the image for this host, and
  // compiles or links it. Throws Error (bad_container, no_image_for_target,
  // code_identity_mismatch, dependency_not_found, symbol_not_found,
  // import_refused, jit_failed)
  // and leaves the cache as it was. Loading an id already cached returns its
  // entry (with tier, from_code_cache and compile_time not reported).
  // With Confine::yes, binary code is refused (errc::code_refused) and
  // bitcode runs through the confinement pass (errc::import_refused, naming
  // what it cannot confine); a tiered container runs its IR.
  // Confined bitcode compiles in a worker process of its own
  // (ConfinementOptions::compile_time_limit): load() waits for it.
  LoadResult load(CodeId id, CodecId codec, std::span<const std::byte> code,
                  Confine confine = Confine::no);

  // For a dispatch loop that serves on while confined code compiles. With
  // Confine::yes: the entry if `id` is loaded confined already; otherwise
  // the code is handed to a thread that prepares its compile and nullopt
  // returned (also while `id` is loading already: its one FinishedLoad
  // comes later). Every refusal load() would throw for the content
  // (bad_container, code_identity_mismatch, no_image_for_target,
  // code_refused for machine code) comes from finish_loads() with
  // before_compile set; a failure of this process's, with target_failed.
  // Throws Error (code_refused) if `id` is loaded unconfined, Error
  // (jit_failed) if no thread can be started, and std::bad_alloc.
  // Unconfined code loads at once, and throws as load() does.
  std::optional<LoadResult> start_load(CodeId id, CodecId codec, std::span<const std::byte> code,
                                       Confine confine);
  // The same, with the container handed over: confined code goes to the
  // thread that prepares its compile without another copy.
  std::optional<LoadResult> start_load(CodeId id, CodecId codec, std::vector<std::byte>&& code,
                                       Confine confine);
  struct FinishedLoad {
    CodeId id = 0;
    std::optional<LoadResult> result;  // loaded: find_ifunc(id) has it
    std::optional<Error> error;        // refused (a crashed or timed-out compile: code_refused)
    // The target could not compile it (no worker could run): no fault of
    // the code's, and it may be sent again.
    bool target_failed = false;
    // Refused for what the container holds before any compile started (not
    // a container, an identity that does not match, machine code, no image
    // for this host), as load() refuses it at once: not a failed compile,
    // so a Receiver does not count it against the code. (A failure of the
    // preparing thread's own, memory or the disk, is target_failed instead.)
    bool before_compile = false;
  };
  // Never blocks on a compile: links what finished since the last call and
  // says what became of each. compiles_in_progress() is true while any runs.
  [[nodiscard]] std::vector<FinishedLoad> finish_loads();
  // Whether `id` is compiling (started, not yet returned by finish_loads()).
  [[nodiscard]] bool loading(CodeId id) const noexcept;

  // Another symbol of a loaded ifunc (e.g. <name>_payload_init), or nullptr if
  // the ifunc is not loaded, does not define it, or runs confined (its code
  // may be called only through invoke()).
  [[nodiscard]] void* lookup(CodeId id, const std::string& symbol);

  // Makes the ifunc `id` a GPU kernel (CachedIfunc::gpu): the CPU code loaded
  // as `id`, if any, stays loaded for `complete`. The caller owns `kernel`
  // and evicts it with evict(id).
  void adopt_gpu(CodeId id, const void* kernel, IfuncMain complete);

  // Removes an ifunc and frees its code (every tier). Returns false if it was
  // not cached. A tier-1 compile under way for it is dropped.
  bool evict(CodeId id);

  // Tiered code. The caller's dispatch loop counts calls of tier-0 code (one
  // compare while nothing waits for a call count) and, between dispatches,
  // links finished tier-1 code and switches to it: find() then returns the
  // new entry, so no call ever runs half-swapped. Tier-0 code stays loaded
  // until the ifunc is evicted (it may still be on a caller's stack, or hold
  // function pointers it handed out).
  void count_call(CodeId id) {
    if (awaiting_calls_ != 0) [[unlikely]]
      note_call(id);
  }
  // Whether a tier-0 ifunc may still be promoted (waiting for calls, or compiling).
  [[nodiscard]] bool promotions_pending() const noexcept {
    return awaiting_calls_ + compiling_ != 0;
  }
  // Whether a compile is due, under way or finished but not linked: what a
  // dispatch loop checks each poll (code waiting for calls costs it nothing).
  [[nodiscard]] bool compiles_in_progress() const noexcept { return compiling_ != 0; }
  // Hands the compiles whose call count was reached to the background thread.
  // A dispatch loop calls it after its credits went out: a waking compiler
  // thread must not delay the call that woke it. promote_ready() does it too.
  void start_due_compiles();
  // Starts due compiles, then links what finished and switches to it.
  Promotions promote_ready();

  // Evicts everything.
  void clear() {
    while (!entries_.empty()) (void)evict(entries_.begin()->first);
    cancel_loads();
  }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void note_call(CodeId id);
  void cancel_loads() noexcept;
  std::optional<LoadResult> start_load_from(CodeId id, CodecId codec,
                                            std::span<const std::byte> code,
                                            std::vector<std::byte>* owned, Confine confine);
  [[nodiscard]] std::optional<LoadResult> already_loaded(CodeId id, Confine confine) const;
  // finish_loads' three sources: the window verifier's verdicts, confined
  // containers prepared beside the caller, and the compile workers.
  void take_verdicts(std::vector<FinishedLoad>& finished);
  void take_prepared(std::vector<FinishedLoad>& finished);
  void take_compiled(std::vector<FinishedLoad>& finished);
  // A confined load's entry, once its code is registered, into the cache.
  void enter_confined(CodeId id, IfuncMain entry);
  void sync_promotion_counts() noexcept;
  std::optional<ConfinedTrap> invoke_confined(const CachedIfunc& ifunc, void* payload,
                                              std::size_t size, void* target_args,
                                              uint64_t caller) noexcept;

  std::unordered_map<CodeId, CachedIfunc> entries_;
  std::size_t awaiting_calls_ = 0;  // tier-0 ifuncs whose compile waits for calls
  std::size_t compiling_ = 0;       // tier-1 compiles due or submitted, not yet linked
};

}  // namespace threechains
