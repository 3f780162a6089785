// The Receiver's limits and the faults it survives, between real processes:
// peers, ring memory, code size, the cache's LRU budget, the code a source
// keeps, a source killed mid-stream, attackers beside an honest source.
#include "engine/admission.hpp"
#include "engine/testing.hpp"
#include "support/counter_target.hpp"
#include "support/two_process.hpp"
#include "trust/envelope.hpp"

#include <catch2/catch.hpp>

#include <signal.h>

using namespace threechains;
using namespace threechains::test;

namespace {

auto error_with(std::string text) {
  return Catch::Predicate<Error>(
      [text](const Error& e) { return std::string(e.what()).find(text) != std::string::npos; },
      "an Error saying \"" + text + "\"");
}

}  // namespace

TEST_CASE("peers beyond max_peers and rings beyond the budgets are refused or shrunk",
          "[limits][ucx]") {
  ReceiverOptions options;
  options.limits.max_peers = 2;
  options.limits.max_ring_bytes_per_peer = 4 * 4096;  // a source asking for 16 slots gets 4
  options.limits.max_ring_bytes = 6 * 4096;           // room for one such ring, not two
  auto target = counter_target(Transport::tcp, nullptr, options, 1);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BINARY);
  Worker worker(Context({.transport = Transport::tcp}));
  Source source(worker);
  const ChannelOptions asks = identified({.slots = 16, .slot_size = 4096});
  Channel first = source.connect("127.0.0.1", target.port(), asks);
  CHECK(first.slots() == 4);
  // The second fits max_peers, but its ring would exceed the total.
  CHECK_THROWS_MATCHES(source.connect("127.0.0.1", target.port(), asks), Error,
                       error_with("max_ring_bytes"));
  for (int i = 0; i < 20; ++i) (void)send(first, counter, uint64_t{1});
  first.close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 20);
  CHECK(result.errors == 1);
}

TEST_CASE("a peer beyond max_peers is turned away at the door", "[limits][ucx]") {
  ReceiverOptions options;
  options.limits.max_peers = 1;
  auto target = counter_target(Transport::tcp, nullptr, options, 1);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BINARY);
  Worker worker(Context({.transport = Transport::tcp}));
  Source source(worker);
  Channel first = source.connect("127.0.0.1", target.port(), identified({}));
  ChannelOptions quick = identified({});
  quick.connect_timeout = std::chrono::milliseconds(3000);
  CHECK_THROWS_AS(source.connect("127.0.0.1", target.port(), quick), Error);
  for (int i = 0; i < 10; ++i) (void)send(first, counter, uint64_t{1});
  first.close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 10);
  CHECK_THAT(result.first_error, Catch::Contains("max_peers"));
}

TEST_CASE("code over max_code_bytes is refused, and the source hears why", "[limits][ucx]") {
  const Ifunc small = Ifunc::load(TC_COUNTER_BINARY);
  const Ifunc big = Ifunc::load(TC_COUNTER_BITCODE);
  REQUIRE(small.code().size() < big.code().size());
  ReceiverOptions options;
  // The binary counter fits, the fat bitcode one does not.
  options.limits.max_code_bytes = (small.code().size() + big.code().size()) / 2;
  auto target = counter_target(Transport::shared_memory, nullptr, options);
  TestSource source(Transport::shared_memory, target.port());
  (void)send(source.channel, big, uint64_t{1000});
  (void)send(source.channel, small, uint64_t{1});
  CHECK_THROWS_MATCHES(source.channel.flush(), Error, error_with("max_code_bytes"));
  (void)send(source.channel, small, uint64_t{1});
  source.channel.close();
  const CounterResult result = target.result();
  CHECK(result.counter == 2);
  CHECK(result.rejected == 1);
}

TEMPLATE_TEST_CASE("three ifuncs through a one-ifunc cache: each payload runs exactly once",
                   "[limits][lru][ucx]", Shm, Tcp) {
  ReceiverOptions options;
  options.limits.max_cached_ifuncs = 1;
  auto target = counter_target(TestType::transport, nullptr, options);
  // Three identities that all add to one counter: +1, +2, +1 per frame.
  const Ifunc ifuncs[] = {Ifunc::load(TC_COUNTER_BITCODE), Ifunc::load(TC_COUNTER_BY_TWO),
                          Ifunc::load(TC_COUNTER_BINARY)};
  TestSource source(TestType::transport, target.port(), options_for<TestType>());
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round)
    for (const Ifunc& ifunc : ifuncs) (void)send(source.channel, ifunc, uint64_t{1});
  source.channel.close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == kRounds * (1 + 2 + 1));
  CHECK(result.dispatched == 3 * kRounds);
  CHECK(result.rejected == 0);
  CHECK(result.errors == 0);
  // Every switch evicted the one loaded; the source's cached frames missed.
  CHECK(result.code_loads == 3 * kRounds);
  CHECK(result.misses >= 3 * kRounds - 3);
}

TEMPLATE_TEST_CASE("a source keeping one ifunc for resends still delivers three",
                   "[limits][ucx]", Shm, Tcp) {
  auto target = counter_target(TestType::transport);
  const Ifunc ifuncs[] = {Ifunc::load(TC_COUNTER_BITCODE), Ifunc::load(TC_COUNTER_BY_TWO),
                          Ifunc::load(TC_COUNTER_BINARY)};
  ChannelOptions options = options_for<TestType>();
  options.max_code_kept = 1;
  TestSource source(TestType::transport, target.port(), options);
  uint64_t with_code = 0;
  for (int round = 0; round < 50; ++round) {
    for (const Ifunc& ifunc : ifuncs)
      with_code += send(source.channel, ifunc, uint64_t{1}) == SendStatus::sent_with_code;
    if (round % 10 == 9) source.channel.flush();  // consumed: the source may let code go
  }
  source.channel.close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 50 * 4);
  CHECK(result.errors == 0);
  CHECK(with_code > 3);  // let go, then carried again
}

TEMPLATE_TEST_CASE("a source killed mid-stream: no partial frame runs, its ring comes back, "
                   "others are served",
                   "[faults][ucx]", Shm, Tcp) {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BINARY);
  ReceiverOptions options;
  // Over tcp a killed peer is noticed, and its ring returned: the budget has
  // room for one ring only, so the second source connects only if it was.
  if (TestType::transport == Transport::tcp) options.limits.max_ring_bytes = 16 * 4096;
  auto target = ChildTarget<CounterResult>(
      TestType::transport,
      [](ChildContext& context) {
        context.receiver.set_target_args(&g_counter);
        // Tell the test when the doomed source's frames are flowing.
        context.receiver.run([&] { return context.receiver.stats().frames_dispatched >= 100; });
        context.ack();
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        context.receiver.run([&] {
          if (std::chrono::steady_clock::now() > deadline)
            throw std::runtime_error("the second source never closed");
          const ReceiverStats& stats = context.receiver.stats();
          return stats.peers_closed - stats.peers_lost >= 1;
        });
        return report(context);
      },
      options);
  const ChannelOptions ring = identified(options_for<TestType>({.slots = 16, .slot_size = 4096}));
  const pid_t doomed = fork();
  if (doomed == 0) {
    try {
      Worker worker(Context({.transport = TestType::transport}));
      Source source(worker);
      Channel channel = source.connect("127.0.0.1", target.port(), ring);
      for (;;) (void)send(channel, counter, uint64_t{1});  // until killed, mid-frame or not
    } catch (...) {
      _exit(1);
    }
  }
  // The target acknowledges once 100 of its frames have run; then the source dies.
  const bool flowing = target.wait_for_ack(std::chrono::seconds(60));
  kill(doomed, SIGKILL);
  waitpid(doomed, nullptr, 0);
  REQUIRE(flowing);

  // Over tcp, wait (bounded) for the ring to come back: the connect retries.
  Worker worker(Context({.transport = TestType::transport}));
  Source source(worker);
  std::optional<Channel> channel;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!channel) {
    try {
      channel.emplace(source.connect("127.0.0.1", target.port(), ring));
    } catch (const Error& e) {
      if (!e.is(errc::peer_refused) || std::chrono::steady_clock::now() > deadline) throw;
    }
  }
  for (int i = 0; i < 5; ++i) (void)send(*channel, counter, uint64_t{1000});
  channel->close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.rejected == 0);  // nothing half-written ran, nothing was thrown away
  CHECK(result.counter >= 100 + 5000);
  CHECK(result.counter - 5000 == result.dispatched - 5);  // each frame that ran, whole, once
  if (TestType::transport == Transport::tcp) CHECK(result.lost == 1);
}

TEMPLATE_TEST_CASE("attackers beside an honest source: every honest frame runs",
                   "[faults][trust][ucx]", Shm, Tcp) {
  auto target = counter_target(TestType::transport);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  Worker worker(Context({.transport = TestType::transport}));
  Source source(worker);
  Channel honest = source.connect("127.0.0.1", target.port(), identified(options_for<TestType>()));
  // Tampered: other code (counter_by_two's) behind the counter's signature.
  const std::span<const std::byte> signed_counter = counter.code();
  const Ifunc by_two = Ifunc::load(TC_COUNTER_BY_TWO);
  const std::span<const std::byte> other = container_body(by_two.code());
  std::vector<std::byte> tampered(signed_counter.begin(),
                                  signed_counter.end() - container_body(signed_counter).size());
  tampered.insert(tampered.end(), other.begin(), other.end());
  const Ifunc forged = Ifunc::from_container(tampered);
  Worker stranger_worker(Context({.transport = TestType::transport}));
  Source stranger(stranger_worker);
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 10; ++i) (void)send(honest, counter, uint64_t{1});
    if (round % 3 == 0) {  // an unknown peer tries
      CHECK_THROWS_MATCHES(
          stranger.connect("127.0.0.1", target.port(), {.identity = KeyPair::generate()}), Error,
          error_with("not one this Receiver trusts"));
    }
    if (round == 5) {  // the honest connection carries tampered code once
      (void)send(honest, forged, uint64_t{1000});
      CHECK_THROWS_MATCHES(honest.flush(), Error, error_with("does not verify"));
    }
  }
  honest.close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 100);
  CHECK(result.dispatched == 100);
  CHECK(result.rejected == 1);
}

// Issue 19, ring integrity: a source whose ring state goes wrong (here a
// commit word no honest source writes: the next frame, stamped 1000 laps
// ahead) is disconnected with the reason, alone; the peer beside it is served.
TEMPLATE_TEST_CASE("a peer whose ring goes inconsistent is disconnected with the reason; "
                   "the peer beside it is served",
                   "[faults][ucx]", Shm, Tcp, ShmAm) {
  auto target = counter_target(context_for<TestType>(), nullptr, {}, 2);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  TestSource honest(context_for<TestType>(), target.port(), options_for<TestType>());
  TestSource broken(context_for<TestType>(), target.port(),
                    options_for<TestType>({.timeout = std::chrono::milliseconds(5000)}));
  for (int i = 0; i < 10; ++i) (void)send(honest.channel, counter, uint64_t{1000});
  for (int i = 0; i < 3; ++i) (void)send(broken.channel, counter, uint64_t{1});
  broken.channel.flush();

  // The fourth frame, right in itself (its code is held), wrongly committed.
  std::vector<std::byte> frame(frame_size(8, 0));
  FrameBuilder builder(frame);
  REQUIRE(builder.begin(CodecId::bitcode, counter.id(), 4, 8, 0) == errc::ok);
  const uint64_t increment = 1;
  builder.write_payload(std::as_bytes(std::span(&increment, 1)));
  ChannelAccess::send_raw_frame(broken.channel, frame, 4 + 1000 * uint64_t{broken.channel.slots()});
  CHECK_THROWS_MATCHES(broken.channel.flush(), Error,
                       error_with("the target disconnected this channel: its ring went "
                                  "inconsistent"));
  // It stays broken (a send into a mapped ring is a store and checks nothing;
  // the next wait or flush tells).
  CHECK_THROWS_MATCHES(broken.channel.flush(), Error, error_with("inconsistent"));
  CHECK_THROWS(broken.channel.close());  // closed all the same

  for (int i = 0; i < 10; ++i) (void)send(honest.channel, counter, uint64_t{1000});
  honest.channel.close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 20003);  // nothing of the broken ring ran after its first three
  CHECK(result.dispatched == 23);
  CHECK_THAT(result.first_error, Catch::Contains("ring went inconsistent"));
}

// The source's side of the same: a credit for more frames than were sent
// (what a broken or hostile target could report) breaks the channel with the
// reason, where it used to make the ring look full until the send timed out.
TEMPLATE_TEST_CASE("a credit for more frames than were sent breaks the channel with the reason",
                   "[faults][ucx]", Shm, Tcp) {
  auto target = counter_target(context_for<TestType>());
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  TestSource source(context_for<TestType>(), target.port(),
                    options_for<TestType>({.timeout = std::chrono::milliseconds(3000)}));
  for (int i = 0; i < 3; ++i) (void)send(source.channel, counter, uint64_t{1});
  source.channel.flush();
  ChannelAccess::store_credit(source.channel, 1000);
  CHECK_THROWS_MATCHES(send(source.channel, counter, uint64_t{1}), Error,
                       error_with("the target reported 1000 frames consumed of 3 sent"));
  CHECK_THROWS_MATCHES(source.channel.flush(), Error, error_with("1000 frames consumed"));
  CHECK_THROWS(source.channel.close());  // closed all the same
  const CounterResult result = target.result();
  CHECK(result.counter == 3);
}

// The admission policy itself, with addresses the loopback tests cannot make
// (every test connection comes from 127.0.0.1): a host flooding half-open
// handshakes evicts its own, never a peer from elsewhere.
TEST_CASE("half-open handshakes from one host evict that host's own, not another's",
          "[limits]") {
  using detail::ProvingPeer;
  const auto t0 = std::chrono::steady_clock::now();
  const auto at = [t0](int ms) { return t0 + std::chrono::milliseconds(ms); };
  const detail::AdmissionLimits limits{.max_pending = 8, .max_pending_per_address = 4};

  // An honest peer from 10.0.0.2 proving since t0; four from the flooder.
  std::vector<ProvingPeer> proving = {{"10.0.0.2", at(0)},  {"10.0.0.66", at(1)},
                                      {"10.0.0.66", at(2)}, {"10.0.0.66", at(3)},
                                      {"10.0.0.66", at(4)}};
  // The flooder's fifth: its own oldest (index 1) goes, not the older honest one.
  CHECK(detail::choose_eviction(proving, "10.0.0.66", limits) == std::optional<std::size_t>(1));
  // Another host's newcomer fits: nobody goes.
  CHECK(detail::choose_eviction(proving, "10.0.0.3", limits) == std::nullopt);

  // Two flooders and the honest peer fill all eight: a newcomer from a third
  // host evicts the oldest of the heaviest host; the honest one stays.
  proving = {{"10.0.0.2", at(0)},  {"10.0.0.66", at(1)}, {"10.0.0.66", at(2)},
             {"10.0.0.66", at(3)}, {"10.0.0.77", at(4)}, {"10.0.0.77", at(5)},
             {"10.0.0.77", at(6)}, {"10.0.0.66", at(7)}};
  CHECK(detail::choose_eviction(proving, "10.0.0.9", limits) == std::optional<std::size_t>(1));
  // The honest host's own second connection: it is not the heaviest either.
  CHECK(detail::choose_eviction(proving, "10.0.0.2", limits) == std::optional<std::size_t>(1));
  // Equal weights: the oldest connection of those hosts goes first.
  proving = {{"10.0.0.66", at(5)}, {"10.0.0.77", at(1)}};
  CHECK(detail::choose_eviction(proving, "10.0.0.9", {.max_pending = 2, .max_pending_per_address = 4}) ==
        std::optional<std::size_t>(1));
  // Below both caps nobody goes.
  CHECK(detail::choose_eviction({}, "10.0.0.9", limits) == std::nullopt);
}
