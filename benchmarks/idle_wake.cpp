// threechains-bench-idle: what an idle Receiver costs and how fast it wakes
// (issue 21), its two progress policies side by side in one run.
//
// Per transport and policy (spin: ProgressOptions::sleep_when_idle = false,
// the loop of old; sleep: the default, spin 100 us then sleep), a target
// (threechains-attack-target: a Receiver that trusts the dev key and counts
// with the counter ifunc, served by Receiver::run) in a process of its own;
// this process connects --peers channels to it and measures
//   idle CPU   the target's user+system time over --idle-seconds with every
//              peer connected and nothing sent (/proc/PID/stat), in cores;
//   hot        round trip of a cached 8-byte frame (send, flush: the target
//              ran it and its credit came back), back to back; median;
//   wake       the same round trip as the first frame after --gap-ms of
//              silence (>= 100 ms: the target sleeps); median and worst.
// And once, the floor any sleeping target has on this machine: a byte's
// round trip through two pipes to a process blocked in poll(2) (100 ms
// timeouts, as the Receiver's) after the same silence, the sender spinning
// for the answer as a source does. On a virtual machine whose idle virtual
// CPUs the host deschedules, that is milliseconds: wake is printed as a
// multiple of it.
// Then, with the default policy, a crowd: the rate of cached 8-byte frames
// streamed on one channel while N-1 more peers (--crowd) are connected and
// idle, against N = 1 in the same run, with the target's resident memory and
// what each connection took (one after another).
// Prints tables; --json appends one line per transport and policy / crowd.
// Goals (issue 21): idle CPU < 1% of a core; wake <= 20 us; rate with 1024
// idle peers >= 0.95x the rate with one.
#include "bench_util.hpp"
#include "support/process.hpp"

#include <threechains/threechains.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// User plus system CPU seconds of every thread of `pid` so far.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  // Fields after the command name (which may hold spaces) in parentheses.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double round_trip_us(tc::Channel& channel, const tc::Ifunc& counter) {
  const uint64_t one = 1;
  const auto start = Clock::now();
  (void)channel.send_bytes(counter, std::as_bytes(std::span(&one, 1)));
  channel.flush();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// The kernel's wake-up floor (see the top): median round trip in us.
double pipe_wake_floor_us(int gap_ms, int wakes) {
  int request[2], reply[2];
  if (pipe(request) != 0 || pipe(reply) != 0) throw std::runtime_error("pipe");
  const pid_t child = fork();
  if (child == 0) {
    char c = 0;
    for (;;) {
      pollfd p{request[0], POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      if (read(request[0], &c, 1) != 1 || write(reply[1], &c, 1) != 1) _exit(0);
    }
  }
  close(request[0]);
  close(reply[1]);
  fcntl(reply[0], F_SETFL, O_NONBLOCK);
  std::vector<double> rtt;
  for (int i = 0; i < wakes; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
    char c = 'x';
    const auto start = Clock::now();
    if (write(request[1], &c, 1) != 1) throw std::runtime_error("pipe write");
    while (read(reply[0], &c, 1) != 1) {
    }
    rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  close(request[1]);
  close(reply[0]);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return bench::median(rtt);
}

// The target (threechains-attack-target) with the given progress policy.
tc::test::Process start_target(const std::string& transport, const std::string& policy) {
  return tc::test::Process({THREECHAINS_ATTACK_TARGET, "--transport", transport, "--trust",
                            THREECHAINS_DEV_PUBLIC_KEY, "--progress", policy});
}

// The port it listens on, from its first line.
uint16_t port_of(tc::test::Process& target) {
  const std::optional<std::string> line = target.read_line_starting("port ", 30s);
  if (!line) throw std::runtime_error("the target did not start: " + target.output());
  return static_cast<uint16_t>(std::stoul(line->substr(5)));
}

// "report c0 c1 c2 counter connected refused dispatched rejected refused_code rss hwm"
struct TargetReport {
  unsigned long long counter = 0;
  long rss_kb = -1;
};

TargetReport report_of(tc::test::Process& target) {
  target.write_line("report");
  const std::optional<std::string> line = target.read_line_starting("report ", 10s);
  TargetReport r;
  char c0[32], c1[32], c2[32];
  unsigned long long connected, refused, dispatched, rejected, code_refused;
  if (!line || std::sscanf(line->c_str(), "report %31s %31s %31s %llu %llu %llu %llu %llu %llu %ld",
                           c0, c1, c2, &r.counter, &connected, &refused, &dispatched, &rejected,
                           &code_refused, &r.rss_kb) != 10)
    throw std::runtime_error("no report from the target");
  return r;
}

struct Crowd {
  int peers = 0;
  double rate = 0;        // frames/s on the streaming channel, median of the rounds
  double connect_ms = 0;  // per idle peer, connected one after another
  long rss_kb = 0;        // the target's, with all of them connected
};

Crowd crowd_run(const std::string& transport, const std::string& policy, int peers, int rounds,
                double seconds, const tc::KeyPair& key, const tc::Ifunc& counter) {
  tc::test::Process target = start_target(transport, policy);
  const uint16_t port = port_of(target);
  tc::Worker worker(tc::Context({.transport = tc::parse_transport(transport)}));
  tc::Source source(worker);
  Crowd c;
  c.peers = peers;
  uint64_t sent = 0;
  tc::Channel busy =
      source.connect("127.0.0.1", port, {.slots = 64, .slot_size = 4096, .identity = key});
  std::vector<tc::Channel> idle;
  const auto connect_start = Clock::now();
  for (int i = 1; i < peers; ++i) {
    try {
      idle.push_back(
          source.connect("127.0.0.1", port, {.slots = 4, .slot_size = 1024, .identity = key}));
    } catch (const tc::Error& error) {
      throw std::runtime_error(fmt::format("peer {} of {}: {}", i + 1, peers, error.what()));
    }
  }
  if (peers > 1)
    c.connect_ms = std::chrono::duration<double, std::milli>(Clock::now() - connect_start).count() /
                   (peers - 1);
  // Each idle peer has run code once (a ring that was used), then goes quiet.
  const uint64_t one = 1;
  for (tc::Channel& channel : idle)
    (void)channel.send_bytes(counter, std::as_bytes(std::span(&one, 1)));
  for (tc::Channel& channel : idle) channel.flush();
  sent += idle.size();
  (void)bench::stream_counter(busy, counter, sent,
                              bench::for_seconds(0.2));  // warm; the idle rings go cold meanwhile
  std::vector<double> rates;
  for (int r = 0; r < rounds; ++r)
    rates.push_back(bench::stream_counter(busy, counter, sent, bench::for_seconds(seconds)));
  c.rate = bench::median(rates);
  const TargetReport report = report_of(target);
  c.rss_kb = report.rss_kb;
  if (report.counter != sent)
    throw std::runtime_error(
        fmt::format("the target counted {} of {} frames", report.counter, sent));
  busy.close();
  for (tc::Channel& channel : idle) channel.close();
  target.write_line("quit");
  return c;
}

struct Figures {
  double idle_cpu = 0;    // cores
  double sparse_cpu = 0;  // cores, while a frame comes every --gap-ms (the wake-ups)
  double hot_us = 0;
  double wake_us = 0;
  double wake_worst_us = 0;
  uint64_t frames = 0;
};

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> transports{"shm", "tcp"};
  std::vector<std::string> policies{"spin", "sleep"};
  int peers = 16;
  double idle_seconds = 10;
  int gap_ms = 150;
  int wakes = 20;
  int hot = 2000;
  std::vector<int> crowd{1, 256, 1024};
  std::vector<std::string> crowd_policies{"sleep", "spin"};
  int crowd_rounds = 3;
  double crowd_seconds = 0.5;
  std::string json;
  CLI::App app{"Idle CPU and wake-up latency of a Receiver, spinning vs sleeping when idle"};
  app.add_option("--transports", transports, "shm and/or tcp")->delimiter(',');
  app.add_option("--policies", policies,
                 "spin, sleep (spin 100 us, then sleep), sleep-N (spin N us, then sleep)")
      ->delimiter(',');
  app.add_option("--peers", peers, "channels connected to the target while it idles");
  app.add_option("--idle-seconds", idle_seconds, "how long the idle CPU is measured");
  app.add_option("--gap-ms", gap_ms, "silence before each wake-up measurement");
  app.add_option("--wakes", wakes, "wake-up measurements");
  app.add_option("--hot", hot, "back-to-back round trips for the hot figure");
  app.add_option("--crowd", crowd, "peers connected while one streams (the first is the baseline)")
      ->delimiter(',');
  app.add_option("--crowd-policies", crowd_policies, "sleep and/or spin, for the crowd")
      ->delimiter(',');
  app.add_option("--crowd-rounds", crowd_rounds, "rounds per crowd; the median is reported");
  app.add_option("--crowd-seconds", crowd_seconds, "length of each round");
  app.add_option("--json", json, "append one JSON line per transport and policy / crowd");
  CLI11_PARSE(app, argc, argv);

  // UCX 1.13 watches at most UCX_ASYNC_MAX_EVENTS descriptors per worker
  // (default 1024; every connection has one, on both sides), read when the
  // library loads: a crowd near that runs again with room, the target too.
  if (!crowd.empty() && *std::max_element(crowd.begin(), crowd.end()) > 900 &&
      getenv("UCX_ASYNC_MAX_EVENTS") == nullptr) {
    setenv("UCX_ASYNC_MAX_EVENTS", "8192", 1);
    execv("/proc/self/exe", argv);
    throw std::runtime_error("execv /proc/self/exe failed");
  }
  // A thousand peers are a few thousand descriptors here and in the target.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &files);
  }
  // First, while this process has no UCX state to fork with.
  const double floor_us = pipe_wake_floor_us(gap_ms, wakes);
  fmt::print(
      "kernel wake-up floor (pipe round trip to a process asleep in poll after {} ms): "
      "{:.1f} us\n",
      gap_ms, floor_us);
  const tc::KeyPair key = tc::KeyPair::load(THREECHAINS_DEV_KEY);
  const tc::Ifunc counter = tc::Ifunc::load(THREECHAINS_BENCH_BINARY);
  fmt::print("{:<5} {:<11} {:>6} {:>14} {:>14} {:>10} {:>10} {:>12} {:>10} {:>11}\n", "",
             "policy", "peers", "idle CPU", "sparse CPU", "hot us", "wake us", "wake worst",
             "wake/hot", "wake/floor");
  for (const std::string& transport : transports) {
    for (const std::string& policy : policies) {
      tc::test::Process target = start_target(transport, policy);
      const uint16_t port = port_of(target);
      tc::Worker worker(tc::Context({.transport = tc::parse_transport(transport)}));
      tc::Source source(worker);
      std::vector<tc::Channel> channels;
      for (int i = 0; i < peers; ++i)
        channels.push_back(
            source.connect("127.0.0.1", port, {.slots = 16, .slot_size = 1024, .identity = key}));
      Figures f;
      for (tc::Channel& channel : channels) (void)round_trip_us(channel, counter);  // code loaded
      f.frames += channels.size();

      const double cpu_before = cpu_seconds(target.pid());
      const auto idle_start = Clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
      f.idle_cpu = (cpu_seconds(target.pid()) - cpu_before) /
                   std::chrono::duration<double>(Clock::now() - idle_start).count();

      std::vector<double> wake;
      const double sparse_before = cpu_seconds(target.pid());
      const auto sparse_start = Clock::now();
      for (int i = 0; i < wakes; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
        wake.push_back(
            round_trip_us(channels[static_cast<std::size_t>(i) % channels.size()], counter));
      }
      f.sparse_cpu = (cpu_seconds(target.pid()) - sparse_before) /
                     std::chrono::duration<double>(Clock::now() - sparse_start).count();
      f.frames += static_cast<uint64_t>(wakes);
      std::vector<double> rtt;
      for (int i = 0; i < hot; ++i) rtt.push_back(round_trip_us(channels.front(), counter));
      f.frames += static_cast<uint64_t>(hot);
      f.hot_us = bench::median(rtt);
      f.wake_us = bench::median(wake);
      f.wake_worst_us = *std::max_element(wake.begin(), wake.end());
      for (tc::Channel& channel : channels) channel.close();

      // Every frame ran: the target's counter says so.
      const TargetReport report = report_of(target);
      target.write_line("quit");
      if (report.counter != f.frames)
        throw std::runtime_error(
            fmt::format("the target counted {} of {} frames", report.counter, f.frames));

      fmt::print(
          "{:<5} {:<11} {:>6} {:>8.4f} cores {:>8.4f} cores {:>10.2f} {:>10.2f} {:>12.2f} "
          "{:>9.2f}x {:>10.2f}x\n",
          transport, policy, peers, f.idle_cpu, f.sparse_cpu, f.hot_us, f.wake_us,
          f.wake_worst_us, f.wake_us / f.hot_us, f.wake_us / floor_us);
      if (!json.empty()) {
        std::ofstream(json, std::ios::app) << fmt::format(
            "{{\"bench\":\"idle\",\"transport\":\"{}\",\"policy\":\"{}\",\"peers\":{},"
            "\"idle_seconds\":{},\"idle_cpu_cores\":{:.5f},\"sparse_cpu_cores\":{:.5f},"
            "\"hot_rtt_us\":{:.3f},"
            "\"wake_rtt_us\":{:.3f},\"wake_worst_us\":{:.3f},\"gap_ms\":{},"
            "\"kernel_wake_floor_us\":{:.3f}}}\n",
            transport, policy, peers, idle_seconds, f.idle_cpu, f.sparse_cpu, f.hot_us, f.wake_us,
            f.wake_worst_us, gap_ms, floor_us);
      }
    }
  }
  fmt::print("goals (issue 21): idle CPU < 0.01 cores; wake <= 20 us\n");
  if (!crowd.empty()) {
    fmt::print("\none channel streams while the rest of the peers idle (cached 8-byte frames)\n");
    fmt::print(
        "(spin: every ring polled every round, the loop of before; sleep: idle rings go cold)\n");
    fmt::print("{:<5} {:<6} {:>6} {:>12} {:>10} {:>14} {:>14}\n", "", "policy", "peers", "rate M/s",
               "vs first", "connect ms/peer", "target RSS MiB");
  }
  for (const std::string& transport : crowd.empty() ? std::vector<std::string>{} : transports) {
    for (const std::string& policy : crowd_policies) {
      double first_rate = 0;
      for (const int peers : crowd) {
        const Crowd c =
            crowd_run(transport, policy, peers, crowd_rounds, crowd_seconds, key, counter);
        if (first_rate == 0) first_rate = c.rate;
        fmt::print("{:<5} {:<6} {:>6} {:>12.3f} {:>9.2f}x {:>14.2f} {:>14.1f}\n", transport, policy,
                   c.peers, c.rate / 1e6, c.rate / first_rate, c.connect_ms,
                   static_cast<double>(c.rss_kb) / 1024);
        if (!json.empty()) {
          std::ofstream(json, std::ios::app) << fmt::format(
              "{{\"bench\":\"crowd\",\"transport\":\"{}\",\"policy\":\"{}\",\"peers\":{},"
              "\"rate\":{:.0f},\"vs_first\":{:.4f},\"connect_ms_per_peer\":{:.3f},"
              "\"target_rss_kb\":{}}}\n",
              transport, policy, c.peers, c.rate, c.rate / first_rate, c.connect_ms, c.rss_kb);
        }
      }
    }
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "threechains-bench-idle: %s\n", error.what());
  return 1;
}
