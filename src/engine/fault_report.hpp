// Internal: faults inside injected code get a name. A SIGSEGV, SIGBUS, SIGILL
// or SIGFPE on a thread that is running an ifunc for a Target writes one line
// to stderr (the ifunc, its code id, the peer, the signal, the faulting
// address and instruction) and then does what the process did before: the
// application's own handler (or UCX's, or the sanitizer's) runs, or the
// default action ends the process. Nothing is hidden or recovered: a fault in
// native code leaves the process in a state nobody can vouch for.
// THREECHAINS_FAULT_REPORT=0 in the environment leaves the handlers alone.
#pragma once

namespace threechains::detail {

struct Target;

// A Target whose dispatch thread's faults get named. The first call installs
// the handlers (chained to what was installed before).
void watch_faults(const Target* target) noexcept;
void unwatch_faults(const Target* target) noexcept;

// For tests in a process whose test framework has handlers of its own (a
// forked child of one): installs the reporter on top again, chained to the
// default action only.
void report_faults_then_default() noexcept;

}  // namespace threechains::detail
