// Lifetimes of the handles, between real processes: moving a Channel onto
// another, a Node pair whose one direction closes while the other goes on, a
// destructor that must not wait for a target that stopped serving. The first
// two were heap use-after-frees in the header-only middle layer; the sanitizer
// build (CMakePresets.json "asan") is what proves them gone.
#include "support/counter_target.hpp"
#include "support/mesh.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>

using namespace threechains;
using namespace threechains::test;

TEMPLATE_TEST_CASE(
    "move-assigning a Channel closes the one it replaces; the survivor still "
    "recovers from a cache miss",
    "[lifetime][ucx]", Shm, Tcp) {
  // Two sources connect; the target serves until both have left.
  auto target = counter_target(TestType::transport, nullptr, {}, 2);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const ChannelOptions small = options_for<TestType>({.slots = 2, .slot_size = 4096});
  TestSource source(TestType::transport, target.port(), small);
  Channel second = source.source.connect("127.0.0.1", target.port(), identified(small));
  source.channel = std::move(second);  // the first channel says goodbye here

  // A payload that fits a slot, but not together with the code: the frame goes
  // cached and the target's miss fetches the code, walking the engine's links.
  std::vector<std::byte> payload(source.channel.max_payload());
  std::memset(payload.data(), 0, payload.size());
  payload[0] = std::byte{3};
  CHECK(send(source.channel, counter, payload) == SendStatus::sent_cached);
  source.channel.flush();
  CHECK(source.channel.stats().code_requests_served == 1);
  CHECK(send(source.channel, counter, uint64_t{4}) == SendStatus::sent_cached);
  source.channel.close();

  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 3 + 4);
  CHECK(result.misses == 1);
  CHECK(result.closed == 2);
  CHECK(result.lost == 0);
  CHECK(result.errors == 0);
}

TEMPLATE_TEST_CASE("a Channel's destructor does not wait for a target that stopped serving",
                   "[lifetime][ucx]", Shm, Tcp) {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  auto target = counter_target(TestType::transport, [](ChildContext& context) {
    // Serve the connection set-up, then stop polling until told.
    REQUIRE(ChildTarget<CounterResult>::wait_command(context) == 'w');
    char c = 0;
    if (read(context.commands, &c, 1) != 1 || c != 'g') throw std::runtime_error("expected go");
  });
  TestSource source(TestType::transport, target.port(), options_for<TestType>({.slots = 4}));
  target.command('w');
  while (try_send(source.channel, counter, uint64_t{1}) != SendStatus::would_block) {
  }
  REQUIRE(source.channel.frames_in_flight() == 4);
  const auto start = std::chrono::steady_clock::now();
  {
    Channel doomed = std::move(source.channel);
  }  // frames in flight, a target that does not answer: no flush, no wait
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took < std::chrono::milliseconds(100));  // close() would wait up to its 30 s timeout
  target.command('g');
  // The goodbye was queued: progress carries it (the Source's engine lives on).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < deadline) (void)source.source.progress();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 4);  // what was committed before the goodbye still runs
  CHECK(result.lost == 0);     // and the goodbye arrived
}

namespace {

struct PairReport {
  uint64_t counter;
  uint64_t dispatched;
};

uint64_t g_pair_counter = 0;

}  // namespace

TEMPLATE_TEST_CASE("a Node keeps sending to a rank that closed its own channels",
                   "[lifetime][node]", Shm, Tcp) {
  // Rank 1 sends to rank 0 (over tcp its frames carry rank 0's credits),
  // then closes its channel to rank 0 (its half of the pair) and keeps
  // serving; rank 0's direction of the same connection must go on, its
  // credits no longer riding on rank 1's frames.
  g_pair_counter = 0;
  NodeOptions options;
  options.receiver.target_args = &g_pair_counter;
  Mesh<PairReport> mesh(
      2, TestType::transport, [](Node&) {},
      [](Node& node, int commands) {
        const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
        for (int i = 0; i < 300; ++i) node.send(0, counter, uint64_t{1});
        node.close();
        Mesh<PairReport>::serve_until_told(node, commands);
        return PairReport{g_pair_counter, node.receiver().stats().frames_dispatched};
      },
      options);
  Node& node = mesh.node();
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  // Rank 0 sends while rank 1 sends to it: both directions busy at once.
  for (int i = 0; i < 100; ++i) node.send(1, counter, uint64_t{5});
  // Wait until rank 1's goodbye has closed our receiving direction.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (node.receiver().stats().peers_closed == 0) {
    node.poll();
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
  CHECK(g_pair_counter == 300);
  for (int i = 0; i < 100; ++i) node.send(1, counter, uint64_t{5});
  node.channel(1).flush();
  const std::vector<PairReport> reports = mesh.finish();
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].counter == 200 * 5);
  CHECK(reports[0].dispatched == 200);
}

TEST_CASE("handles reject what they cannot use with errc::invalid_argument", "[lifetime][error]") {
  Worker worker(Context({.transport = Transport::shared_memory}));
  CHECK_THROWS_MATCHES(Node(worker, 3, 3), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.is(errc::invalid_argument) &&
                                std::string(e.what()).find("rank 3") != std::string::npos;
                       }));
  Receiver receiver(worker);
  const uint16_t port = receiver.port();
  CHECK_THROWS_MATCHES(Receiver(worker), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.is(errc::invalid_argument);
                       }));
  // A Node that cannot start on this Worker leaves its Receiver serving.
  CHECK_THROWS_MATCHES(Node(worker, 0, 1), Error, Catch::Predicate<Error>([](const Error& e) {
                         return e.is(errc::invalid_argument);
                       }));
  CHECK(receiver.port() == port);
  CHECK(receiver.poll() == 0);
  Source source(worker);
  CHECK_THROWS_MATCHES(
      source.connect("127.0.0.1", receiver.port(), {.slots = 0}), Error,
      Catch::Predicate<Error>([](const Error& e) { return e.is(errc::invalid_argument); }));
  // Moving a Receiver onto another stops the one it replaces: a new one can start.
  Receiver moved = std::move(receiver);
  moved = Receiver(Worker(Context({.transport = Transport::shared_memory})));
  CHECK_NOTHROW(Receiver(worker));
}
