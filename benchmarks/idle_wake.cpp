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
// Prints a table; --json appends one line per transport and policy.
// Goals (issue 21): idle CPU < 1% of a core; wake <= 20 us.
#include "support/process.hpp"

#include <threechains/threechains.hpp>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

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
  return median(rtt);
}

struct Figures {
  double idle_cpu = 0;  // cores
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
  std::string json;
  CLI::App app{"Idle CPU and wake-up latency of a Receiver, spinning vs sleeping when idle"};
  app.add_option("--transports", transports, "shm and/or tcp")->delimiter(',');
  app.add_option("--policies", policies, "spin and/or sleep")->delimiter(',');
  app.add_option("--peers", peers, "channels connected to the target while it idles");
  app.add_option("--idle-seconds", idle_seconds, "how long the idle CPU is measured");
  app.add_option("--gap-ms", gap_ms, "silence before each wake-up measurement");
  app.add_option("--wakes", wakes, "wake-up measurements");
  app.add_option("--hot", hot, "back-to-back round trips for the hot figure");
  app.add_option("--json", json, "append one JSON line per transport and policy");
  CLI11_PARSE(app, argc, argv);

  // First, while this process has no UCX state to fork with.
  const double floor_us = pipe_wake_floor_us(gap_ms, wakes);
  fmt::print("kernel wake-up floor (pipe round trip to a process asleep in poll after {} ms): "
             "{:.1f} us\n",
             gap_ms, floor_us);
  const tc::KeyPair key = tc::KeyPair::load(THREECHAINS_DEV_KEY);
  const tc::Ifunc counter = tc::Ifunc::load(THREECHAINS_BENCH_BINARY);
  fmt::print("{:<5} {:<6} {:>6} {:>14} {:>10} {:>10} {:>12} {:>10} {:>11}\n", "", "policy", "peers",
             "idle CPU", "hot us", "wake us", "wake worst", "wake/hot", "wake/floor");
  for (const std::string& transport : transports) {
    for (const std::string& policy : policies) {
      tc::test::Process target({THREECHAINS_ATTACK_TARGET, "--transport", transport, "--trust",
                                THREECHAINS_DEV_PUBLIC_KEY, "--progress", policy});
      const std::optional<std::string> port_line = target.read_line_starting("port ", 30s);
      if (!port_line) throw std::runtime_error("the target did not start: " + target.output());
      const auto port = static_cast<uint16_t>(std::stoul(port_line->substr(5)));
      tc::Worker worker(tc::Context({.transport = tc::parse_transport(transport)}));
      tc::Source source(worker);
      std::vector<tc::Channel> channels;
      for (int i = 0; i < peers; ++i)
        channels.push_back(source.connect("127.0.0.1", port, {.slots = 16, .slot_size = 1024,
                                                              .identity = key}));
      Figures f;
      for (tc::Channel& channel : channels) (void)round_trip_us(channel, counter);  // code loaded
      f.frames += channels.size();

      const double cpu_before = cpu_seconds(target.pid());
      const auto idle_start = Clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
      f.idle_cpu = (cpu_seconds(target.pid()) - cpu_before) /
                   std::chrono::duration<double>(Clock::now() - idle_start).count();

      std::vector<double> wake;
      for (int i = 0; i < wakes; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
        wake.push_back(round_trip_us(channels[static_cast<std::size_t>(i) % channels.size()],
                                     counter));
      }
      f.frames += static_cast<uint64_t>(wakes);
      std::vector<double> rtt;
      for (int i = 0; i < hot; ++i) rtt.push_back(round_trip_us(channels.front(), counter));
      f.frames += static_cast<uint64_t>(hot);
      f.hot_us = median(rtt);
      f.wake_us = median(wake);
      f.wake_worst_us = *std::max_element(wake.begin(), wake.end());
      for (tc::Channel& channel : channels) channel.close();

      // Every frame ran: the target's counter says so.
      target.write_line("report");
      const std::optional<std::string> report = target.read_line_starting("report ", 10s);
      target.write_line("quit");
      unsigned long long counted = 0;
      char c0[32], c1[32], c2[32];
      if (!report ||
          std::sscanf(report->c_str(), "report %31s %31s %31s %llu", c0, c1, c2, &counted) != 4 ||
          counted != f.frames)
        throw std::runtime_error(fmt::format("the target counted {} of {} frames", counted, f.frames));

      fmt::print("{:<5} {:<6} {:>6} {:>8.4f} cores {:>10.2f} {:>10.2f} {:>12.2f} {:>9.2f}x {:>10.2f}x\n",
                 transport, policy, peers, f.idle_cpu, f.hot_us, f.wake_us, f.wake_worst_us,
                 f.wake_us / f.hot_us, f.wake_us / floor_us);
      if (!json.empty()) {
        std::ofstream(json, std::ios::app) << fmt::format(
            "{{\"bench\":\"idle\",\"transport\":\"{}\",\"policy\":\"{}\",\"peers\":{},"
            "\"idle_seconds\":{},\"idle_cpu_cores\":{:.5f},\"hot_rtt_us\":{:.3f},"
            "\"wake_rtt_us\":{:.3f},\"wake_worst_us\":{:.3f},\"gap_ms\":{},"
            "\"kernel_wake_floor_us\":{:.3f}}}\n",
            transport, policy, peers, idle_seconds, f.idle_cpu, f.hot_us, f.wake_us,
            f.wake_worst_us, gap_ms, floor_us);
      }
    }
  }
  fmt::print("goals (issue 21): idle CPU < 0.01 cores; wake <= 20 us\n");
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "threechains-bench-idle: %s\n", error.what());
  return 1;
}
