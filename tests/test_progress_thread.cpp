// Background progress: a Receiver (or a Node) served by a thread of its own,
// while the process's main thread blocks on something else entirely. The
// thread-sanitizer build runs these ([thread]).
#include "support/counter_target.hpp"
#include "support/mesh.hpp"

#include <catch2/catch.hpp>

using namespace threechains;
using namespace threechains::test;

namespace {

struct ThreadReport {
  CounterResult counter;
  bool poll_refused;  // poll() on the main thread was refused while the thread served
};

}  // namespace

TEMPLATE_TEST_CASE("a Receiver served by its progress thread runs every frame", "[thread][ucx]",
                   Shm, Tcp) {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  ChildTarget<ThreadReport> target(TestType::transport, [](ChildContext& context) {
    context.receiver.set_target_args(&g_counter);
    context.receiver.start();
    ThreadReport report{};
    try {
      (void)context.receiver.poll();
    } catch (const Error& e) {
      report.poll_refused = e.is(errc::invalid_argument);
    }
    // The main thread blocks on the pipe: only the progress thread can serve.
    char c = 0;
    if (read(context.commands, &c, 1) != 1 || c != 'q') throw std::runtime_error("expected q");
    context.receiver.stop();
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
  CHECK(result.counter.counter == 3000);
  CHECK(result.counter.dispatched == 1000);
  CHECK(result.counter.code_loads == 1);
}

namespace {
uint64_t g_thread_counter = 0;
}

TEMPLATE_TEST_CASE("a Node rank served by its progress thread runs what the mesh sends it",
                   "[thread][node]", Shm, Tcp) {
  g_thread_counter = 0;
  NodeOptions options;
  options.receiver.target_args = &g_thread_counter;
  Mesh<uint64_t> mesh(
      2, TestType::transport, [](Node&) {},
      [](Node& node, int commands) {
        node.start();
        char c = 0;
        if (read(commands, &c, 1) != 1 || c != 'q') throw std::runtime_error("expected q");
        node.stop();
        return g_thread_counter;
      },
      options);
  Node& node = mesh.node();
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  for (int i = 0; i < 500; ++i) node.send(1, counter, uint64_t{2});
  node.channel(1).flush();
  const std::vector<uint64_t> reports = mesh.finish();
  REQUIRE(reports.size() == 1);
  CHECK(reports[0] == 1000);
}
