// Background progress: a Receiver (or a Node) served by a thread of its own,
// while the process's main thread blocks on something else entirely or keeps
// using its handles. The thread-sanitizer build runs these ([thread]).
#include "support/counter_target.hpp"
#include "support/mesh.hpp"
#include "support/relay.hpp"

#include <catch2/catch.hpp>

using namespace threechains;
using namespace threechains::test;

namespace {

struct ThreadReport {
  CounterResult counter;
  bool poll_refused;          // poll() on the main thread, while the thread served
  bool second_start_refused;  // start() twice
  bool cache_refused;         // cache() while the thread served
  bool restarted;             // stop, poll, start, stop again
};

bool refused(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.is(errc::invalid_argument);
  }
  return false;
}

}  // namespace

TEMPLATE_TEST_CASE("a Receiver served by its progress thread runs every frame", "[thread][ucx]",
                   Shm, Tcp) {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  ChildTarget<ThreadReport> target(TestType::transport, [](ChildContext& context) {
    Receiver& receiver = context.receiver;
    receiver.set_target_args(&g_counter);
    ThreadReport report{};
    // A thread that is started and dropped without stop() is joined by the destructor.
    {
      Receiver other(Worker(Context({.transport = TestType::transport})));
      other.start();
    }
    receiver.start();
    report.poll_refused = refused([&] { (void)receiver.poll(); });
    report.second_start_refused = refused([&] { receiver.start(); });
    report.cache_refused = refused([&] { (void)receiver.cache(); });
    // The main thread blocks on the pipe: only the progress thread can serve.
    char c = 0;
    if (read(context.commands, &c, 1) != 1 || c != 'q') throw std::runtime_error("expected q");
    receiver.stop();
    (void)receiver.poll();  // the caller's loop again
    receiver.start();
    receiver.stop();
    report.restarted = true;
    report.counter = threechains::test::report(context);
    return report;
  });
  TestSource source(TestType::transport, target.port());
  for (int i = 0; i < 1000; ++i) (void)send(source.channel, counter, uint64_t{3});
  source.channel.flush();  // only possible if the thread consumes them
  source.channel.close();
  target.command('q');
  const ThreadReport result = target.result();
  INFO(result.counter.first_error);
  CHECK(result.poll_refused);
  CHECK(result.second_start_refused);
  CHECK(result.cache_refused);
  CHECK(result.restarted);
  CHECK(result.counter.counter == 3000);
  CHECK(result.counter.dispatched == 1000);
  CHECK(result.counter.code_loads == 1);
}

TEMPLATE_TEST_CASE(
    "a Channel dropped while its Worker's progress thread runs says goodbye through it",
    "[thread][ucx]", Shm, Tcp) {
  auto target = counter_target(TestType::transport);  // forked before this process has UCX
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  Worker worker(Context({.transport = TestType::transport}));
  Receiver receiver(worker);
  Source source(worker);
  Channel channel = source.connect("127.0.0.1", target.port(), identified({}));
  for (int i = 0; i < 10; ++i) (void)send(channel, counter, uint64_t{1});
  channel.flush();
  receiver.start();
  CHECK(refused([&] { channel.flush(); }));
  CHECK(refused([&] { (void)source.connect("127.0.0.1", target.port()); }));
  { Channel doomed = std::move(channel); }       // the goodbye is handed to the thread
  const CounterResult result = target.result();  // the target ends when the goodbye arrives
  receiver.stop();
  INFO(result.first_error);
  CHECK(result.counter == 10);
  CHECK(result.closed == 1);
  CHECK(result.lost == 0);
}

namespace {

RelayState g_thread_relay{};

struct NodeThreadReport {
  RelayState state;
  NodeStats stats;
  bool poll_refused;
  bool receiver_start_refused;
};

}  // namespace

TEMPLATE_TEST_CASE("a Node rank served by its progress thread forwards what the mesh sends it",
                   "[thread][node]", Shm, Tcp) {
  // A relay bounces between rank 0 (its main loop) and rank 1 (its thread):
  // every hop on rank 1 is a send from injected code that only the Node's own
  // loop carries out, so the thread must run the Node's queue, not only its
  // Receiver.
  constexpr int64_t kForwards = 2000;
  g_thread_relay = {};
  Mesh<NodeThreadReport> mesh(
      2, TestType::transport, [](Node& node) { node.expose("relay_state", &g_thread_relay); },
      [](Node& node, int commands) {
        NodeThreadReport report{};
        report.receiver_start_refused = refused([&] { node.receiver().start(); });
        node.start();
        report.poll_refused = refused([&] { (void)node.poll(); });
        char c = 0;
        if (read(commands, &c, 1) != 1 || c != 'q') throw std::runtime_error("expected q");
        node.stop();
        report.state = g_thread_relay;
        report.stats = node.stats();
        return report;
      });
  Node& node = mesh.node();
  run_relay(node, Ifunc::load(TC_RELAY), kForwards, g_thread_relay);
  const std::vector<NodeThreadReport> reports = mesh.finish();
  REQUIRE(reports.size() == 1);
  CHECK(g_thread_relay.finished == kForwards);
  CHECK(g_thread_relay.seen + reports[0].state.seen == kForwards + 1);
  CHECK(reports[0].state.seen == kForwards / 2 + 1);  // rank 1 ran every other hop
  CHECK(reports[0].stats.sends >= static_cast<uint64_t>(kForwards / 2));
  CHECK(reports[0].poll_refused);
  CHECK(reports[0].receiver_start_refused);
  CHECK(g_thread_relay.bad_origin + reports[0].state.bad_origin == 0);
}
