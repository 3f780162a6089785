// threechains-bench-flood: what a flood of junk Active Messages from peers
// with no key costs an honest source (issue 19, item 4), in one run.
//
// A target (threechains-attack-target: a Receiver that trusts the dev key and
// counts with the counter ifunc) in a process of its own; this process is an
// honest source streaming the cached counter (8-byte payload) to it, and
// measures its frame rate in three phases, rounds alternating:
//   quiet  nothing else runs;
//   hog    a process that only spins beside it (the CPU the attacker takes,
//          without its messages: on a machine with fewer cores than
//          processes this is what any third process costs);
//   flood  threechains-attacker junk-am sends --bytes of junk (1 MiB
//          messages over 4 endpoints, eager and rendezvous, five AM ids) to
//          the target; the rate is taken while it runs.
// Prints the median rate of each phase and flood/quiet, flood/hog; --json
// appends one line per transport. The goal: flood >= 0.5x quiet.
#include "bench_util.hpp"
#include "support/process.hpp"

#include <threechains/threechains.hpp>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// A process that spins until killed: the hog phase's third process.
pid_t start_hog() {
  const pid_t pid = fork();
  if (pid == 0) {
    volatile uint64_t spin = 0;
    for (;;) spin = spin + 1;
  }
  return pid;
}

void stop(pid_t pid) {
  ::kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> transports{"shm", "tcp"};
  std::string bytes = "512M";
  double quiet_seconds = 1.0;
  int rounds = 3;
  std::string json;
  CLI::App app{"An honest source's rate while peers with no key flood the target with junk"};
  app.add_option("--transports", transports, "shm and/or tcp")->delimiter(',');
  app.add_option("--bytes", bytes, "junk per flood (the attacker's --bytes)");
  app.add_option("--seconds", quiet_seconds, "length of the quiet and hog phases");
  app.add_option("--rounds", rounds, "rounds of quiet, hog, flood");
  app.add_option("--json", json, "append one JSON line per transport");
  CLI11_PARSE(app, argc, argv);

  const tc::KeyPair key = tc::KeyPair::load(THREECHAINS_DEV_KEY);
  const tc::Ifunc counter = tc::Ifunc::load(THREECHAINS_BENCH_BINARY);
  for (const std::string& transport : transports) {
    tc::test::Process target(
        {THREECHAINS_ATTACK_TARGET, "--transport", transport, "--trust", THREECHAINS_DEV_PUBLIC_KEY});
    const std::optional<std::string> port_line = target.read_line_starting("port ", 30s);
    if (!port_line) throw std::runtime_error("the target did not start: " + target.output());
    const std::string port = port_line->substr(5);
    tc::Worker worker(tc::Context({.transport = tc::parse_transport(transport)}));
    tc::Source source(worker);
    tc::Channel channel = source.connect("127.0.0.1", static_cast<uint16_t>(std::stoul(port)),
                                         {.slots = 64, .slot_size = 4096, .identity = key});
    uint64_t sent = 0;
    (void)bench::stream_counter(channel, counter, sent, bench::for_seconds(0.2));  // warm: code loaded, rings touched

    std::vector<double> quiet, hog, flood, flood_seconds;
    for (int round = 0; round < rounds; ++round) {
      quiet.push_back(bench::stream_counter(channel, counter, sent, bench::for_seconds(quiet_seconds)));
      const pid_t spinner = start_hog();
      hog.push_back(bench::stream_counter(channel, counter, sent, bench::for_seconds(quiet_seconds)));
      stop(spinner);
      tc::test::Process attacker({THREECHAINS_ATTACKER, "junk-am", "--bytes", bytes, "--size", "1M",
                                  "--port", port, "--transport", transport});
      const auto flood_start = Clock::now();
      flood.push_back(bench::stream_counter(channel, counter, sent, [&] { return !attacker.running(); }));
      flood_seconds.push_back(std::chrono::duration<double>(Clock::now() - flood_start).count());
      const std::string output = attacker.read_rest(10000ms);
      if (output.find("junk-am: sent=") == std::string::npos)
        throw std::runtime_error("the attacker did not run: " + output);
    }
    channel.close();
    const uint64_t counted = bench::attack_target_counter(target);
    if (counted != sent)
      throw std::runtime_error(fmt::format("the target counted {} of {} frames", counted, sent));

    const double q = bench::median(quiet), h = bench::median(hog), f = bench::median(flood);
    fmt::print("{}: honest 8-byte cached frames, median of {} rounds (flood of {} took {:.2f} s)\n",
               transport, rounds, bytes, bench::median(flood_seconds));
    fmt::print("  quiet {:.3f} M/s   hog {:.3f} M/s   flood {:.3f} M/s\n", q / 1e6, h / 1e6, f / 1e6);
    fmt::print("  flood/quiet {:.2f}x   flood/hog {:.2f}x   (goal: flood >= 0.5x quiet)\n", f / q,
               f / h);
    if (!json.empty()) {
      std::ofstream out(json, std::ios::app);
      out << fmt::format(
          "{{\"bench\":\"flood\",\"transport\":\"{}\",\"junk\":\"{}\",\"rounds\":{},"
          "\"quiet_rate\":{:.0f},\"hog_rate\":{:.0f},\"flood_rate\":{:.0f},\"flood_seconds\":{:.3f},"
          "\"flood_vs_quiet\":{:.3f},\"flood_vs_hog\":{:.3f}}}\n",
          transport, bytes, rounds, q, h, f, bench::median(flood_seconds), f / q, f / h);
    }
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "threechains-bench-flood: %s\n", error.what());
  return 1;
}
