// Internal: what a signal handler of ours does with a signal that is not its
// own: whatever was installed before it runs (the application's handler,
// UCX's, a sanitizer's), or the default action once the faulting instruction
// runs again. Async-signal-safe. Shared by the fault reporter
// (engine/fault_report.cpp) and the window's traps (confine/window_traps.cpp).
#pragma once

#include <signal.h>

namespace threechains::detail {

inline void pass_to_previous(const struct sigaction& before, int signal, siginfo_t* info,
                             void* context) noexcept {
  if ((before.sa_flags & SA_SIGINFO) != 0 && before.sa_sigaction != nullptr) {
    before.sa_sigaction(signal, info, context);
  } else if (before.sa_handler == SIG_IGN) {
    return;
  } else if (before.sa_handler == SIG_DFL || before.sa_handler == nullptr) {
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(signal, &fallback, nullptr);
  } else {
    before.sa_handler(signal);
  }
}

}  // namespace threechains::detail
