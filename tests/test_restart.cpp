// Restarts between real processes: a target killed (SIGKILL) mid-stream and
// started again on the same port. The source gets a clear error naming the
// peer within its timeout, reconnects, and the new target runs every frame
// sent after the reconnect exactly once, loading the code once.
#include "support/counter_target.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>

using namespace threechains;
using namespace threechains::test;

TEMPLATE_TEST_CASE("a target killed mid-stream and restarted on its port serves the source again",
                   "[restart][ucx]", Shm, Tcp) {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const ChannelOptions options = options_for<TestType>({.timeout = std::chrono::seconds(5)});
  // Both targets are forked now, before this process has UCX state (new
  // T(prvalue) builds them in place: they cannot move); the second waits.
  std::unique_ptr<ChildTarget<CounterResult>> second(new ChildTarget<CounterResult>(
      counter_target(TestType::transport, nullptr, {}, 1, /*deferred=*/true)));
  std::unique_ptr<ChildTarget<CounterResult>> first(
      new ChildTarget<CounterResult>(counter_target(TestType::transport)));
  const uint16_t port = first->port();
  TestSource source(TestType::transport, port, options);
  for (int i = 0; i < 100; ++i) (void)send(source.channel, counter, uint64_t{1});
  source.channel.flush();
  for (int i = 0; i < 3; ++i) (void)send(source.channel, counter, uint64_t{1});  // in flight
  first->kill_now();

  // The source notices at its next blocking call, bounded by its timeout.
  // It must be the loss UCX reports (not our own timeout running out), and it
  // must come before that timeout.
  std::string error;
  bool from_ucx = false;
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 100000; ++i) (void)send(source.channel, counter, uint64_t{1});
    source.channel.flush();
  } catch (const Error& e) {
    error = e.what();
    from_ucx = e.ucs_status().has_value();
  }
  const auto noticed = std::chrono::steady_clock::now() - start;
  INFO(error);
  CHECK_THAT(error, Catch::Contains("channel to 127.0.0.1:" + std::to_string(port)));
  CHECK(from_ucx);
  CHECK(noticed < options.timeout);

  // A new target on the same port listens at once (address reuse is the default).
  second->start(port);
  REQUIRE(second->port() == port);
  source.channel = source.source.connect("127.0.0.1", port, identified(options));
  Channel& reconnected = source.channel;
  CHECK(send(reconnected, counter, uint64_t{7}) == SendStatus::sent_with_code);
  for (int i = 0; i < 49; ++i)
    CHECK(send(reconnected, counter, uint64_t{7}) == SendStatus::sent_cached);
  reconnected.close();

  const CounterResult result = second->result();
  INFO(result.first_error);
  CHECK(result.counter == 50 * 7);
  CHECK(result.dispatched == 50);
  CHECK(result.code_loads == 1);
  CHECK(result.errors == 0);
}
