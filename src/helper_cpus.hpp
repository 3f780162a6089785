// Where the library's helpers run: the compile worker processes and the
// threads beside the one that serves frames (the tier-1 compiler, the
// preparation and checks of large code, the window verifier, the window
// watchdog).
//
// A launcher that binds a rank to a core (mpirun --bind-to core, srun
// --cpu-bind, taskset) binds every thread and process that rank starts
// afterwards: a helper started by a bound serving thread would share its one
// core, and every cycle the helper spends (a confined compile: seconds) would
// come out of the serving thread's, in slices of a scheduler tick or more
// (docs/performance.md, "Who had the CPU"). So a helper is moved beside the
// thread that started it: onto the machine's CPUs that thread is not bound
// to, less those the kernel keeps isolated (isolcpus). An unbound thread's
// helpers stay where they are (nothing to move off), and so do they where
// the process's cpuset leaves no other CPU (the kernel refuses the move).
#pragma once

#include <sys/types.h>

namespace threechains::detail {

// Moves `task` (a thread or process id; 0: the calling thread) onto the CPUs
// beside the calling thread's (above). For a new thread, call it from that
// thread: it was started with its creator's CPUs. False where nothing moved
// (the calling thread is bound to no CPU in particular, or no other CPU may
// be used): the helper then runs where it was started.
bool place_beside_calling_thread(pid_t task) noexcept;

}  // namespace threechains::detail
