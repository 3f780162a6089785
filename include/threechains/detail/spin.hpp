// Internal: the serving loop shared by Receiver::run, Node::run and the
// progress thread of start().
#pragma once

#include <threechains/progress.hpp>

#include <chrono>

#include <sched.h>

namespace threechains::detail {

// Calls `poll()` until `stop()` holds. Empty polls in a row yield the CPU
// every `yield_after` (processes that spin do not starve each other on a
// machine with fewer cores than processes); once they have lasted
// `options.spin`, `sleep(options.max_sleep)` blocks until there may be work.
template <class Poll, class Sleep, class StopCondition>
void serve_until(Poll&& poll, Sleep&& sleep, StopCondition&& stop, const ProgressOptions& options,
                 unsigned yield_after) {
  using Clock = std::chrono::steady_clock;
  unsigned idle = 0;
  Clock::time_point idle_since{};
  while (!stop()) {
    if (poll() != 0) {
      idle = 0;
      continue;
    }
    if (idle++ == 0) {
      if (options.sleep_when_idle) idle_since = Clock::now();
      continue;
    }
    if (idle % yield_after == 0) sched_yield();
    // The clock is read once every 64 empty polls: it costs more than a poll.
    if (options.sleep_when_idle && idle % 64 == 0 && Clock::now() - idle_since >= options.spin) {
      sleep(options.max_sleep);
      // The spin budget runs from the last work, not from the last wake-up:
      // a sleep that timed out, or was woken by an event that brought no
      // frame, sleeps again after a few polls instead of spinning `spin`
      // once more (with spin = 4 ms that doubled a sparse target's CPU).
      idle = 1;
    }
  }
}

}  // namespace threechains::detail
