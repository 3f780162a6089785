// Internal: the polling loop shared by Receiver::run and Node::run.
#pragma once

#include <sched.h>

namespace threechains::detail {

// Calls `poll()` until `stop()` holds, yielding the CPU after `yield_after`
// polls in a row that did nothing, so spinning processes do not starve each
// other on a machine with fewer cores than processes.
template <class Poll, class StopCondition>
void spin_until(Poll&& poll, StopCondition&& stop, unsigned yield_after) {
  unsigned idle = 0;
  while (!stop()) {
    if (poll() != 0) {
      idle = 0;
    } else if (++idle >= yield_after) {
      idle = 0;
      sched_yield();
    }
  }
}

}  // namespace threechains::detail
