// WindowVerification: the window verifier (confine/verify_x86.hpp,
// verify_aarch64.hpp) on a thread of its own, for the loads a Receiver
// finishes beside its serving (JitCache::finish_loads). The verifier is
// linear in the code, but a large object still takes tens of milliseconds
// to read (heavy.c's 8 blocks, 2026-11-29: the honest peer's longest round
// trip 30 ms with it on the serving thread), and there every peer waits.
// The code waits linked in its window, run by no one, until its verdict
// is taken back.
#pragma once

#include "confine/verifier.hpp"
#include "jit/job_thread.hpp"

#include <threechains/jit_cache.hpp>

#include <cstdint>
#include <vector>

namespace threechains {

// This build's verifier for this host's code, or a refusal where it has none.
[[nodiscard]] confined::Verdict verify_window_code(const confined::VerifierInput& input);

class WindowVerification {
 public:
  struct Job {
    CodeId id = 0;
    uint64_t serial = 0;  // tells a cancelled load's verdict from a later one's
    // The linked code as it will run: its owner keeps it mapped, and
    // unchanged, until the verdict is taken (take_finished).
    std::vector<confined::CodeRange> code;
    uint64_t main = 0;
    uint64_t window_base = 0;
  };
  struct Verified {
    CodeId id = 0;
    uint64_t serial = 0;
    confined::Verdict verdict;
  };

  // Throws std::system_error when no thread is to be had.
  WindowVerification();

  void submit(Job job) { thread_.submit(std::move(job)); }
  [[nodiscard]] bool has_finished() const noexcept { return thread_.has_finished(); }
  [[nodiscard]] std::vector<Verified> take_finished() { return thread_.take_finished(); }

 private:
  JobThread<Job, Verified> thread_;
};

}  // namespace threechains
