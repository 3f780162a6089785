// Where the library's helpers run: the compile worker processes and the
// threads beside the one that serves frames (the tier-1 compiler, the
// preparation and checks of large code, the window verifier):
// JitOptions::helper_cpus.
//
// By default a helper runs wherever it starts, and it starts with the CPUs
// and scheduling class of the thread that starts it (the serving thread). A
// launcher that binds a rank to one core binds its helpers to that core
// too, and every cycle they spend (a confined compile: seconds) comes out of
// the serving thread's (docs/performance.md, "A target bound to a core").
// The library does not guess where else they may go: a plain affinity mask
// (taskset, mpirun --bind-to, numactl) is the operator's placement, and the
// CPUs outside it may be another job's or isolated (nohz_full); there, too,
// nice 10 weighs only within the helper's own autogroup or cgroup. So the
// operator names them.
//
// Whatever the CPUs, a helper never runs in a real-time class: it processes
// bytes that peers sent, and a compile worker runs untrusted code's compile
// for seconds. A helper of a SCHED_FIFO/RR serving thread is put back in
// SCHED_OTHER (at nice 10, set where it starts).
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <optional>
#include <vector>

namespace threechains::detail {

class HelperCpus {
 public:
  // Where they start.
  HelperCpus() = default;
  // On `cpus` (JitOptions::helper_cpus): empty, where they start. Throws
  // Error(errc::invalid_argument) for an id outside 0..CPU_SETSIZE-1.
  explicit HelperCpus(const std::vector<int>& cpus);

  // Puts `task` (a thread or process id; 0: the calling thread) on these
  // CPUs, as far as the kernel allows (it keeps them within the process's
  // cpuset and refuses a set with none left in it). False where none were
  // named, or the kernel refused: the helper then runs where it started.
  [[nodiscard]] bool place(pid_t task) const noexcept;

 private:
  std::optional<cpu_set_t> cpus_;
};

// Leaves a real-time scheduling class (SCHED_FIFO, SCHED_RR) for SCHED_OTHER:
// the calling thread (0) or another task. Nothing for any other class.
void leave_real_time(pid_t task) noexcept;

}  // namespace threechains::detail
