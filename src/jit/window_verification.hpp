// WindowVerification: window code linked into its window (jit/window_link.hpp)
// and read by the window verifier (confine/verify_x86.hpp,
// verify_aarch64.hpp) on a thread of its own, for the loads a Receiver
// finishes beside its serving (JitCache::finish_loads). The verifier is
// linear in the code, but a large object still takes tens of milliseconds
// to read (heavy.c's 8 blocks, 2026-11-29: the honest peer's longest round
// trip 30 ms with it on the serving thread), and the link was most of the
// serving thread's longest call per load (169-453 us, against 19-78 us
// with it here: threechains-bench-compile-end, 2026-11-29); there every
// peer waits. The code waits linked in its window, run by no one, until its
// verdict is taken back.
#pragma once

#include "confine/verifier.hpp"
#include "jit/job_thread.hpp"
#include "jit/object_store.hpp"
#include "jit/window_link.hpp"
#include "jit/window_memory.hpp"

#include <threechains/error.hpp>
#include <threechains/frame.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace threechains {

// Whether this build verifies window code for this host (the window tier
// is on only where it does).
#if defined(THREECHAINS_HAVE_WINDOW_VERIFIER) || defined(__aarch64__)
inline constexpr bool kHaveWindowVerifier = true;
#else
inline constexpr bool kHaveWindowVerifier = false;
#endif

// This build's verifier for this host's code, or a refusal where it has none.
[[nodiscard]] confined::Verdict verify_window_code(const confined::VerifierInput& input);

class WindowVerification {
 public:
  struct Job {
    CodeId id = 0;
    uint64_t serial = 0;            // tells a cancelled load's result from a later one's
    std::vector<std::byte> object;
    std::string name;               // the ifunc's, for errors
    std::string entry;              // the symbol to enter it by
    // The window it goes into, held for this job until its result is
    // taken back (take_finished): its memory manager and mapper, and base.
    llvm::jitlink::JITLinkMemoryManager* memory = nullptr;
    jit::WindowMemoryMapper* mapper = nullptr;
    uint64_t window_base = 0;
    // Where the object is kept once the verifier accepts it, if anywhere:
    // written here, not on the serving thread (a file made and renamed,
    // 28-32 us on the 2-core VM's disk, more on a shared filesystem). The
    // store outlives this object (JitCache::Impl declares it first).
    const ObjectStore* store = nullptr;
    std::string store_key;
  };
  struct Verified {
    CodeId id = 0;
    uint64_t serial = 0;
    // Why it did not link (the verifier not run), else the link, to be
    // kept or discarded by whoever takes this back.
    std::optional<Error> link_error;
    jit::WindowLink link;
    confined::Verdict verdict;
    // The verifier could not finish, or the link failed, for this
    // process's reasons (memory), not the code's: not to count against it.
    bool target_failed = false;
  };

  // Throws std::system_error when no thread is to be had.
  explicit WindowVerification(detail::HelperCpus cpus);
  // Stops a verification under way (it ends refused) and the thread; queued
  // jobs are dropped (~JobThread), and links not taken back undone: the
  // windows jobs name must outlive this.
  ~WindowVerification() { stopping_.store(true, std::memory_order_relaxed); }
  WindowVerification(const WindowVerification&) = delete;
  WindowVerification& operator=(const WindowVerification&) = delete;

  void submit(Job job) { thread_.submit(std::move(job)); }
  [[nodiscard]] bool has_finished() const noexcept { return thread_.has_finished(); }
  [[nodiscard]] std::vector<Verified> take_finished() { return thread_.take_finished(); }

 private:
  std::atomic<bool> stopping_{false};
  JobThread<Job, Verified> thread_;  // last: stopped before what it reads
};

}  // namespace threechains
