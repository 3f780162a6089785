// An idle serving loop sleeps (ProgressOptions) and wakes for every kind of
// work: frames by message (tcp), frames stored into its ring (shared memory,
// the doorbell), another thread's wake(). The [thread] ones run under TSan.
#include "support/counter_target.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <random>
#include <thread>

#include <time.h>

using namespace threechains;
using namespace threechains::test;
using namespace std::chrono_literals;

namespace {

struct IdleReport {
  CounterResult counter;
  double idle_cpu;  // CPU seconds per second of the process while it had nothing to do
  uint64_t sleeps;
  uint64_t doorbells;
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The child: served by start()'s thread; on 'i' it measures its own CPU over
// 400 ms in which the main thread only sleeps, so what it counts is the
// progress thread idling with its peers connected.
IdleReport serve_and_measure(ChildContext& context) {
  Receiver& receiver = context.receiver;
  receiver.set_target_args(&g_counter);
  receiver.start();
  IdleReport report{};
  for (char c = 0; read(context.commands, &c, 1) == 1 && c != 'q';) {
    if (c != 'i') continue;
    const double before = process_cpu_seconds();
    std::this_thread::sleep_for(400ms);
    report.idle_cpu = (process_cpu_seconds() - before) / 0.4;
    context.ack();
  }
  receiver.stop();
  report.counter = threechains::test::report(context);
  report.sleeps = receiver.stats().sleeps;
  report.doorbells = receiver.stats().doorbells;
  return report;
}

// Sleeps so long that a wake-up it missed shows as the source's flush timing out.
ReceiverOptions sleepy(std::chrono::microseconds spin) {
  ReceiverOptions options;
  options.progress.spin = spin;
  options.progress.max_sleep = 20s;
  return options;
}

}  // namespace

TEMPLATE_TEST_CASE("an idle Receiver sleeps with its peers connected, and the next frame wakes it",
                   "[idle][thread][ucx]", Shm, Tcp) {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  ChildTarget<IdleReport> target(TestType::transport, serve_and_measure, sleepy(100us));
  constexpr int kPeers = 4;
  std::vector<std::unique_ptr<TestSource>> peers;
  for (int i = 0; i < kPeers; ++i)
    peers.push_back(std::make_unique<TestSource>(TestType::transport, target.port(),
                                                 ChannelOptions{.timeout = 5s}));
  for (auto& peer : peers) {
    (void)send(peer->channel, counter, uint64_t{1});
    peer->channel.flush();
  }
  target.command_and_wait('i');  // 400 ms with nothing to do: it sleeps now
  // Each peer's frame after the sleep must wake it; a missed wake-up would
  // keep it asleep for 20 s, past the channels' 5 s timeout.
  for (auto& peer : peers) {
    (void)send(peer->channel, counter, uint64_t{10});
    const auto start = std::chrono::steady_clock::now();
    peer->channel.flush();
    // Not a figure (threechains-bench-idle measures those): far below the
    // 20 s sleep, so the frame woke it.
    CHECK(std::chrono::steady_clock::now() - start < 2s);
  }
  for (auto& peer : peers) peer->channel.close();
  target.command('q');
  const IdleReport report = target.result();
  INFO(report.counter.first_error);
  CHECK(report.counter.counter == kPeers * 11);
  CHECK(report.counter.errors == 0);
  CHECK(report.sleeps >= 1);
  // A spinning loop counts ~1.0 here; a sleeping one next to nothing. The
  // bound is loose for a shared, noisy machine.
  INFO("idle CPU of the target: " << report.idle_cpu << " of a core");
  CHECK(report.idle_cpu < 0.2);
}

// The spin budget runs from the last work: a sleep that times out goes back
// to sleep, not to another `spin` of polling. With spin 30 ms and sleeps
// that time out every 10 ms, restarting the budget on each wake-up would
// keep the target busy ~3/4 of the time.
TEMPLATE_TEST_CASE("a Receiver whose sleeps time out does not spin its budget again each time",
                   "[idle][thread][ucx]", Shm, Tcp) {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  ReceiverOptions options;
  options.progress.spin = 30ms;
  options.progress.max_sleep = 10ms;
  ChildTarget<IdleReport> target(TestType::transport, serve_and_measure, options);
  TestSource source(TestType::transport, target.port(), ChannelOptions{.timeout = 5s});
  (void)send(source.channel, counter, uint64_t{1});
  source.channel.flush();
  target.command_and_wait('i');  // 400 ms, the first 30 of them spent spinning
  source.channel.close();
  target.command('q');
  const IdleReport report = target.result();
  CHECK(report.counter.counter == 1);
  CHECK(report.sleeps >= 10);
  INFO("idle CPU of the target: " << report.idle_cpu << " of a core");
  CHECK(report.idle_cpu < 0.3);
}

TEMPLATE_TEST_CASE("no frame is lost to a target falling asleep as it is stored",
                   "[idle][thread][ucx]", Shm, Tcp) {
  // spin = 0: the target sleeps after a few empty polls, so a frame is
  // stored right as it falls asleep over and over. Gaps of 0-150 us between
  // ping-pongs move the frame across the sleep's every step (sleep word
  // written, fence — tens of microseconds where membarrier interrupts a
  // virtual CPU —, last look, arm, poll) and past it, into the sleep itself.
  // Missed once, the flush times out.
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  ChildTarget<IdleReport> target(TestType::transport, serve_and_measure, sleepy(0us));
  TestSource source(TestType::transport, target.port(), ChannelOptions{.timeout = 5s});
  std::minstd_rand random(7);
  constexpr int kRounds = 2000;
  for (int i = 0; i < kRounds; ++i) {
    const auto gap = std::chrono::nanoseconds(random() % 150000);
    const auto until = std::chrono::steady_clock::now() + gap;
    while (std::chrono::steady_clock::now() < until) {
    }
    (void)send(source.channel, counter, uint64_t{1});
    source.channel.flush();
  }
  source.channel.close();
  target.command('q');
  const IdleReport report = target.result();
  INFO(report.counter.first_error);
  CHECK(report.counter.counter == kRounds);
  // The race was run, not dodged: the target slept between many of them.
  INFO("sleeps: " << report.sleeps);
  CHECK(report.sleeps >= kRounds / 10);
}

TEST_CASE("wake() ends a Receiver's wait from another thread", "[idle][thread][ucx]") {
  Receiver receiver(Worker(Context({.transport = Transport::shared_memory})));
  std::atomic<bool> waiting{false};
  std::thread waker([&] {
    while (!waiting.load()) std::this_thread::yield();
    std::this_thread::sleep_for(50ms);
    receiver.wake();
  });
  waiting.store(true);
  const auto start = std::chrono::steady_clock::now();
  bool woken = false;
  // A wake() before the wait began is not lost either: the event fd keeps it.
  while (!woken && std::chrono::steady_clock::now() - start < 10s) woken = receiver.wait(20s);
  const auto took = std::chrono::steady_clock::now() - start;
  waker.join();
  CHECK(woken);
  // It slept until the wake() 50 ms in (a wait that returned at once, for
  // any other reason, would not get here), and no longer.
  CHECK(took >= 40ms);
  CHECK(took < 5s);
}

TEMPLATE_TEST_CASE(
    "a ring nobody stored into for a while stops being polled, and its next frame "
    "rings it back",
    "[idle][thread][ucx]", Shm, Tcp) {
  // The target never sleeps (spin 60 s), so only the cooling of idle rings
  // is at work: after 5 ms with nothing, a shared-memory ring goes cold and
  // the source's next frame must ring the doorbell (tcp frames are messages:
  // their rings are never polled, so no doorbell at all).
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  ReceiverOptions options;
  options.progress.spin = 60s;
  ChildTarget<IdleReport> target(TestType::transport, serve_and_measure, options);
  TestSource quiet(TestType::transport, target.port(), ChannelOptions{.timeout = 5s});
  TestSource busy(TestType::transport, target.port(), ChannelOptions{.timeout = 5s});
  constexpr int kRounds = 20;
  for (int i = 0; i < kRounds; ++i) {
    (void)send(quiet.channel, counter, uint64_t{1});
    quiet.channel.flush();
    // The other peer keeps the target polling meanwhile (so its rounds, and
    // its cooling passes, go on).
    const auto until = std::chrono::steady_clock::now() + 20ms;
    while (std::chrono::steady_clock::now() < until) {
      (void)send(busy.channel, counter, uint64_t{1000});
      busy.channel.flush();
    }
  }
  quiet.channel.close();
  busy.channel.close();
  target.command('q');
  const IdleReport report = target.result();
  INFO(report.counter.first_error);
  CHECK(report.counter.counter % 1000 == kRounds);  // every quiet frame ran
  CHECK(report.sleeps == 0);
  if (TestType::transport == Transport::shared_memory) {
    INFO("doorbells: " << report.doorbells);
    CHECK(report.doorbells >= kRounds / 2);  // the quiet ring went cold between its frames
  } else {
    CHECK(report.doorbells == 0);
  }
}
