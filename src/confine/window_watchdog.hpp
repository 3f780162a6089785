// Internal: the time budget of window code (issue 32's "budgets that hold",
// for the tier of issue 33). Window code has no fuel points: the verifier
// keeps it to plain computation, so nothing in it looks at a clock. A
// watchdog thread looks instead. Each thread that runs window code under a
// budget has a Watch: the serial of the invocation under way (0 between
// runs), written by that thread around each call; two relaxed stores, no
// clock, no fence on the hot path. In a run of calls (run_window_calls)
// the trampoline writes a fresh serial before each call, and between two
// calls the last one's stays: a look that falls there sees a call that
// has just returned, and the handler, finding the thread outside window
// code, stops nothing. Every quarter budget the
// watchdog reads each Watch; an invocation it sees under way at two looks a
// budget apart has run longer than its budget, and the watchdog names it in
// `stop` and signals the thread (kWatchdogSignal, by pthread_kill). The
// thread's handler (confine/window_traps.cpp) stops the run with a
// WindowFault::time trap if that invocation is still under way and the
// thread is inside window code; elsewhere (the trampoline) it lets it run,
// and the watchdog signals again at its next look.
//
// An invocation is stopped after at least its budget and, the watchdog
// first seeing it at most a period after it starts and a period between
// looks, at most 1.5 budgets plus the time the watchdog and the signal
// take to be scheduled (measured in docs/security.md, "The window").
// The watchdog wakes every quarter of the smallest budget in use (at least
// 250 us) while window code runs, and sleeps once none has run for 100 ms
// (where the kernel offers membarrier; else it keeps waking).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace threechains::confined {

// What the watchdog sends: a real-time signal (queued, never merged with
// another thread's) that nothing in the library or UCX uses. One that did
// not come from this process's pthread_kill is passed to the handler
// installed before ours.
[[nodiscard]] int watchdog_signal() noexcept;

struct Watch {
  std::atomic<uint64_t> running{0};  // the invocation under way; 0 between
  std::atomic<uint64_t> stop{0};     // the one the watchdog ordered stopped
  std::atomic<int64_t> budget_ns{0};
  uint64_t serial = 0;  // the owning thread's own count of invocations
};

// This thread's Watch: where the watchdog finds what it runs.
class ThreadWatch {
 public:
  // Registered with the watchdog (started by the first call in the
  // process) until the thread ends. Allocates the first time on each
  // thread; nullptr if that failed, and then nothing watches the run.
  [[nodiscard]] static Watch* get() noexcept {
    return current_ != nullptr ? current_ : register_this_thread();
  }
  // nullptr if the thread has none; for the signal handler.
  [[nodiscard]] static Watch* if_any() noexcept { return current_; }

  // Set while the watchdog sleeps, no window code having run for 100 ms: a
  // run that begins then wakes it (wake_watchdog). The watchdog parks only
  // after a heavy fence (asymmetric_fence.hpp) shows no run under way, so
  // either it sees a run's `running` store or the run sees this.
  static inline std::atomic<bool> parked_{false};
  static void wake_watchdog() noexcept;

 private:
  friend struct WatchRegistration;
  [[gnu::noinline, gnu::cold]] static Watch* register_this_thread() noexcept;
  [[gnu::tls_model("initial-exec")]] static constinit thread_local Watch* current_;
};

// Brackets one invocation of window code under `budget` on this thread.
class WatchedRun {
 public:
  explicit WatchedRun(std::chrono::nanoseconds budget) noexcept {
    if (budget.count() <= 0) return;
    watch_ = ThreadWatch::get();
    if (watch_ == nullptr) return;
    if (watch_->budget_ns.load(std::memory_order_relaxed) != budget.count())
      watch_->budget_ns.store(budget.count(), std::memory_order_relaxed);
    watch_->running.store(++watch_->serial, std::memory_order_relaxed);
    // The store before the load, for the compiler; the watchdog's heavy
    // fence orders them for the CPU.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (ThreadWatch::parked_.load(std::memory_order_relaxed)) [[unlikely]]
      ThreadWatch::wake_watchdog();
  }
  ~WatchedRun() {
    if (watch_ != nullptr) watch_->running.store(0, std::memory_order_relaxed);
  }
  // The watch it writes; null without a budget. run_window_calls hands it
  // to the trampoline, which starts a fresh invocation before each call.
  [[nodiscard]] Watch* watch() const noexcept { return watch_; }
  WatchedRun(const WatchedRun&) = delete;
  WatchedRun& operator=(const WatchedRun&) = delete;

 private:
  Watch* watch_ = nullptr;
};

}  // namespace threechains::confined
