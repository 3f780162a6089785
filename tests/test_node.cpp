// X-RDMA: injected code that sends code onward, across a mesh of real
// processes, through the runtime interface (<threechains/runtime.h>).
#include "support/mesh.hpp"
#include "support/relay.hpp"

#include <catch2/catch.hpp>

#include <span>

using namespace threechains;
using namespace threechains::test;

namespace {

struct RelayReport {
  RelayState state;
  NodeStats stats;
};

RelayState g_relay{};

}  // namespace

TEMPLATE_TEST_CASE("a chain of 10,000 forwards travels a 3-rank mesh", "[node][xrdma]", Shm, Tcp) {
  constexpr int64_t kForwards = 10000;
  g_relay = {};
  Mesh<RelayReport> mesh(
      3, TestType::transport, [](Node& node) { node.expose("relay_state", &g_relay); },
      [](Node& node, int commands) {
        Mesh<RelayReport>::serve_until_told(node, commands);
        return RelayReport{g_relay, node.stats()};
      });
  Node& node = mesh.node();
  run_relay(node, Ifunc::load(TC_RELAY), kForwards, g_relay);
  const std::vector<RelayReport> reports = mesh.finish();

  CHECK(g_relay.finished == kForwards);
  int64_t seen = g_relay.seen;
  int64_t bad_origin = g_relay.bad_origin;
  for (const RelayReport& r : reports) {
    seen += r.state.seen;
    bad_origin += r.state.bad_origin;
    CHECK(r.stats.max_queued <= 2);  // a forward is queued, sent, and gone
  }
  CHECK(seen == kForwards + 1);
  CHECK(bad_origin == 0);
}

TEST_CASE("a local recursion 100,000 deep neither grows the stack nor the queue", "[node][xrdma]") {
  constexpr int64_t kDepth = 100000;
  Node node(Worker(Context({.transport = Transport::shared_memory})), 0, 1, secured(NodeOptions{}));
  int64_t calls = 0;
  node.receiver().set_target_args(&calls);
  node.send(0, Ifunc::load(TC_RECURSE), kDepth);
  while (calls < kDepth + 1) node.poll();
  CHECK(calls == kDepth + 1);
  CHECK(node.stats().local_dispatches == static_cast<uint64_t>(kDepth + 1));
  CHECK(node.stats().max_queued <= 2);
  CHECK(node.queued() == 0);
}

TEMPLATE_TEST_CASE("a chain of forwards travels a 3-rank mesh whose ranks run it confined",
                   "[node][xrdma][confinement]", Shm, Tcp) {
  constexpr int64_t kForwards = 1000;
  g_relay = {};
  NodeOptions options;
  const PublicKey key = test_identity().public_key();
  // The key signs code that every rank runs confined: its relay_state is
  // exposed by size, send_self and send_named are the checked ones.
  options.receiver.trust = Trust().allow_peer(key).allow_code_signer(key);
  const auto expose = [](Node& node) {
    node.expose("relay_state", std::as_writable_bytes(std::span(&g_relay, 1)), true);
  };
  Mesh<RelayReport> mesh(
      3, TestType::transport, expose,
      [](Node& node, int commands) {
        Mesh<RelayReport>::serve_until_told(node, commands);
        return RelayReport{g_relay, node.stats()};
      },
      options);
  Node& node = mesh.node();
  const Ifunc relay = Ifunc::load(TC_RELAY);
  run_relay(node, relay, kForwards, g_relay);
  // Rank 0 holds the relay it was sent, and holds it confined: there is no
  // entry point to call directly (JitCache::find), only the runner.
  CHECK(node.receiver().cache().contains(relay.id()));
  CHECK(node.receiver().cache().find(relay.id()) == nullptr);
  const std::vector<RelayReport> reports = mesh.finish();
  CHECK(g_relay.finished == kForwards);
  int64_t seen = g_relay.seen;
  for (const RelayReport& r : reports) seen += r.state.seen;
  CHECK(seen == kForwards + 1);
  CHECK(node.receiver().stats().code_trapped == 0);
}
