// A child target that runs the counter ifunc (examples/ifuncs/counter.c) and
// reports what its Receiver saw: shared by the two-process tests.
#pragma once

#include "support/two_process.hpp"

#include <cstdint>
#include <functional>

namespace threechains::test {

struct CounterResult {
  uint64_t counter;
  uint64_t dispatched;
  uint64_t rejected;
  uint64_t code_loads;
  uint64_t misses;
  uint64_t errors;
  uint64_t lost;
  uint64_t closed;
  char first_error[256];
};

inline uint64_t g_counter = 0;  // the child target's counter (each child has its own copy)

inline CounterResult report(const ChildContext& context) {
  CounterResult result{};
  const ReceiverStats& stats = context.receiver.stats();
  result.counter = g_counter;
  result.dispatched = stats.frames_dispatched;
  result.rejected = stats.frames_rejected;
  result.code_loads = stats.code_loads;
  result.misses = stats.cache_misses;
  result.errors = context.errors.size();
  result.lost = stats.peers_lost;
  result.closed = stats.peers_closed;
  context.first_error(result.first_error);
  return result;
}

// A child target that serves the counter until `sources` sources have closed.
inline ChildTarget<CounterResult> counter_target(
    ContextOptions transport, std::function<void(ChildContext&)> before_serving = nullptr,
    ReceiverOptions options = {}, uint64_t sources = 1, bool deferred = false) {
  return ChildTarget<CounterResult>(
      transport,
      [before_serving, sources](ChildContext& context) {
        context.receiver.set_target_args(&g_counter, sizeof(g_counter));
        if (before_serving) before_serving(context);
        ChildTarget<CounterResult>::serve_until_closed(context.receiver, sources);
        return report(context);
      },
      std::move(options), deferred);
}

inline ChildTarget<CounterResult> counter_target(
    Transport transport, std::function<void(ChildContext&)> before_serving = nullptr,
    ReceiverOptions options = {}, uint64_t sources = 1, bool deferred = false) {
  return counter_target(ContextOptions{.transport = transport}, std::move(before_serving),
                        std::move(options), sources, deferred);
}

}  // namespace threechains::test
