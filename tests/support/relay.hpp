// The relay ifunc's view of a rank (tests/ifuncs/xrdma/relay.c, exposed as
// "relay_state") and the loop that starts a chain and waits for its end:
// shared by the X-RDMA tests.
#pragma once

#include <threechains/node.hpp>

#include <chrono>
#include <cstdint>

namespace threechains::test {

// Mirrors struct relay_state in relay.c.
struct RelayState {
  int64_t seen;        // hops that ran on this rank
  int64_t finished;    // rank 0: total forwards, once the chain ended
  int64_t bad_origin;  // hops whose origin was not the previous rank
};

// Sends a chain of `forwards` hops to rank 1 and serves `node` (rank 0) until
// `state` (its exposed relay_state) says the chain ended, or two minutes pass.
inline void run_relay(Node& node, const Ifunc& relay, int64_t forwards, const RelayState& state) {
  struct {
    int64_t remaining, hops;
  } start{forwards, 0};
  node.send(1, relay, start);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  node.run([&] { return state.finished != 0 || std::chrono::steady_clock::now() > deadline; });
}

}  // namespace threechains::test
