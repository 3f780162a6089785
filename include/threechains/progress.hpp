// ProgressOptions: how a serving loop (Receiver::run, Node::run, and the
// progress thread of start()) spends the time when there is nothing to do.
#pragma once

#include <chrono>

namespace threechains {

struct ProgressOptions {
  // Spin, then sleep. After `spin` of polls that found nothing, the loop
  // blocks until a message, a connection or a frame stored into a ring
  // arrives (UCX's event fd; a source that stores a frame into the ring of a
  // sleeping target rings its doorbell). Off: the loop spins for good, and
  // one core is this loop's.
  bool sleep_when_idle = true;
  // How long to keep polling after the last work before sleeping: traffic
  // with gaps shorter than this never pays a wake-up.
  std::chrono::microseconds spin{100};
  // The longest sleep: run()'s stop condition is looked at at least this
  // often (a condition another thread changes; Receiver::wake() ends a sleep
  // at once).
  std::chrono::milliseconds max_sleep{100};
};

}  // namespace threechains
