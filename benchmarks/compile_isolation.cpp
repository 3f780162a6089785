// threechains-bench-compile-isolation: what another peer's long compile
// costs an honest peer of the same target (issue 32, item 1), in one run.
//
// A target (threechains-attack-target --confined yes: the dev key's code
// runs confined, so it compiles in a worker process; with --tier window,
// --confined window: its counter in allocate_exposed memory, so confined
// code takes the window tier, verified beside the serving thread) in a
// process of its own; this process is an honest source running the counter ifunc (bitcode,
// confined, loaded first) one frame at a time, each send timed to its flush:
//   quiet    nothing else runs;
//   hog      a process spinning at nice 10 beside it (the floor: what any
//            third busy process costs on a machine with few cores);
//   connect  second peers (this program again, --send counter), one after
//            another, each connecting, running the counter (already
//            compiled: no worker starts) once and leaving: what a peer's
//            arrival and departure alone cost the honest peer;
//   compile  a second peer (this program again, --send heavy) sends tests/ifuncs/heavy.c
//            with 8 blocks,
//            which takes the worker (at nice 10, beside two busy processes) about a
//            minute; the round trips are taken
//            until the target answers it.
// --bind puts the target (every thread it starts) on CPU 1 and this source,
// the second peers and the hog on CPU 0, as a launcher binds each rank to a
// core: the target's helpers (its compile workers, the threads beside its
// serving thread) start on its core too, unless --helper-cpus names others
// (JitOptions::helper_cpus, src/helper_cpus.hpp).
// Prints the p50, p99 and longest round trip of each phase, and the longest
// during the compile against the quiet p99 (the goal: within 2x);
// --json appends one line per transport, with each phase's bounds and the
// start of its longest round trip on CLOCK_MONOTONIC and the two pids, so
// that benchmarks/sched_attribution.py can say, from a `perf sched record
// -k CLOCK_MONOTONIC` trace, who had the CPUs during that round trip.
#include "bench_util.hpp"
#include "support/process.hpp"

#include <threechains/threechains.hpp>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// Seconds on CLOCK_MONOTONIC (steady_clock here), the clock `perf record
// -k CLOCK_MONOTONIC` stamps its events with: benchmarks/sched_attribution.py
// lines the phases and their longest round trips up with the scheduler's trace.
double monotonic_seconds(Clock::time_point at) {
  return std::chrono::duration<double>(at.time_since_epoch()).count();
}

struct Trips {
  std::vector<double> us;  // each round trip, microseconds
  double began = 0;        // the phase's first send, monotonic seconds
  double ended = 0;        // its last flush's return
  double longest_began = 0;  // when its longest round trip started
  [[nodiscard]] double at(double quantile) const {
    if (us.empty()) return 0;
    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(quantile * sorted.size()))];
  }
};

// A phase's bounds and its longest round trip, on the monotonic clock, for
// benchmarks/sched_attribution.py.
std::string phase_json(const char* name, const Trips& trips) {
  return fmt::format(
      "\"{}\":{{\"began\":{:.6f},\"ended\":{:.6f},\"longest_began\":{:.6f},"
      "\"longest_us\":{:.2f}}}",
      name, trips.began, trips.ended, trips.longest_began, trips.at(1.0));
}

// This thread (and what it starts from now on) on one CPU only.
void bind_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    throw std::runtime_error(fmt::format("binding to CPU {}: {}", cpu, std::strerror(errno)));
}

// One frame of the counter (an 8-byte 1), sent and flushed, until `done()`.
template <class Done>
Trips round_trips(tc::Channel& channel, const tc::Ifunc& counter, uint64_t& sent, Done&& done) {
  Trips trips;
  const uint64_t one = 1;
  double longest = -1;
  Clock::time_point longest_began;
  const Clock::time_point began = Clock::now();
  Clock::time_point ended;
  do {
    const auto started = Clock::now();
    (void)channel.send_bytes(counter, std::as_bytes(std::span(&one, 1)));
    channel.flush();
    ended = Clock::now();
    const double us = std::chrono::duration<double, std::micro>(ended - started).count();
    trips.us.push_back(us);
    if (us > longest) {
      longest = us;
      longest_began = started;
    }
    ++sent;
  } while (!done());
  trips.began = monotonic_seconds(began);
  trips.ended = monotonic_seconds(ended);
  trips.longest_began = monotonic_seconds(longest_began);
  return trips;
}

// --send: the second peer. Sends `container` once and says how it went.
int send_once(const std::string& transport, uint16_t port, const std::string& what) {
  const std::string container = what == "counter" ? THREECHAINS_BENCH_BITCODE : THREECHAINS_BENCH_HEAVY;
  tc::Worker worker(tc::Context({.transport = tc::parse_transport(transport)}));
  tc::Source source(worker);
  tc::Channel channel =
      source.connect("127.0.0.1", port, {.identity = tc::KeyPair::load(THREECHAINS_DEV_KEY)});
  const tc::Ifunc heavy = tc::Ifunc::load(container);
  // The measuring side starts its compile window here: a peer's arrival
  // is the connect phase's to measure.
  std::printf("connected\n");
  std::fflush(stdout);
  std::vector<std::byte> payload(64);  // the counter reads its first 8 bytes: 0
  const auto started = Clock::now();
  std::string outcome = "ran";
  try {
    (void)channel.send_bytes(heavy, payload);
    // A remote peer would not take a core of this machine while it waits:
    // this one looks every 20 ms, asleep in between.
    for (;;) {
      try {
        channel.flush(std::chrono::milliseconds(1));
        break;
      } catch (const tc::Error& error) {
        if (!error.is(tc::errc::timeout)) throw;
        std::this_thread::sleep_for(20ms);
      }
    }
  } catch (const tc::Error& error) {
    outcome = error.what();
  }
  std::printf("sent: %.1f s: %s\n", std::chrono::duration<double>(Clock::now() - started).count(),
              outcome.c_str());
  std::fflush(stdout);
  channel.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> transports{"shm"};
  double quiet_seconds = 5.0;
  long limit_ms = 600'000;
  std::string json;
  std::string send_transport;
  std::string send_what = "heavy";
  int send_port = 0;
  int churn_peers = 20;
  std::string tier = "checked";
  bool bind = false;
  std::string helper_cpus;
  CLI::App app{"An honest peer's round trips while another peer's code compiles"};
  app.add_option("--transports", transports, "shm and/or tcp")->delimiter(',');
  app.add_option("--seconds", quiet_seconds, "length of the quiet phase");
  app.add_option("--compile-time-limit-ms", limit_ms, "the target's compile_time_limit");
  app.add_option("--json", json, "append one JSON line per transport");
  app.add_option("--send", send_transport, "(internal) be the second peer over this transport");
  app.add_option("--port", send_port, "(internal) the target's port, with --send");
  app.add_option("--what", send_what, "(internal) with --send: heavy or counter")
      ->check(CLI::IsMember({"heavy", "counter"}));
  app.add_option("--peers", churn_peers, "second peers that connect and leave in the connect phase");
  app.add_option("--tier", tier,
                 "the target's tier for confined code: checked (its counter exposed by "
                 "address; this option's default) or window (its counter in allocate_exposed "
                 "memory, as the library's default tier wants it)")
      ->check(CLI::IsMember({"checked", "window"}));
  app.add_flag("--bind", bind,
               "the target on CPU 1 and this source (with the second peers and the hog) on "
               "CPU 0, as a launcher binds each process to a core");
  app.add_option("--helper-cpus", helper_cpus,
                 "the target's JitOptions::helper_cpus, a comma list (with --bind: 0 puts its "
                 "helpers beside its core)");
  CLI11_PARSE(app, argc, argv);
  if (!send_transport.empty())
    return send_once(send_transport, static_cast<uint16_t>(send_port), send_what);

  const tc::KeyPair key = tc::KeyPair::load(THREECHAINS_DEV_KEY);
  const tc::Ifunc counter = tc::Ifunc::load(THREECHAINS_BENCH_BITCODE);
  for (const std::string& transport : transports) {
    // --bind: the target, every thread of it, on CPU 1 and this process on
    // CPU 0, as a launcher binds each process to a core (a spawned process
    // starts with its parent's mask).
    if (bind) bind_to_cpu(1);
    std::vector<std::string> target_args{THREECHAINS_ATTACK_TARGET,
                                         "--transport",
                                         transport,
                                         "--trust",
                                         THREECHAINS_DEV_PUBLIC_KEY,
                                         "--confined",
                                         tier == "window" ? "window" : "yes",
                                         "--compile-time-limit-ms",
                                         std::to_string(limit_ms),
                                         "--progress",
                                         "spin"};
    if (!helper_cpus.empty()) target_args.insert(target_args.end(), {"--helper-cpus", helper_cpus});
    tc::test::Process target(target_args);
    if (bind) bind_to_cpu(0);
    const std::optional<std::string> port_line = target.read_line_starting("port ", 30s);
    if (!port_line) throw std::runtime_error("the target did not start: " + target.output());
    const std::string port = port_line->substr(5);
    tc::Worker worker(tc::Context({.transport = tc::parse_transport(transport)}));
    tc::Source source(worker);
    tc::Channel channel = source.connect("127.0.0.1", static_cast<uint16_t>(std::stoul(port)),
                                         {.slots = 64, .slot_size = 4096, .identity = key});
    uint64_t sent = 0;
    // Warm: the counter compiled (in a worker: it is confined too), rings touched.
    (void)round_trips(channel, counter, sent, [end = Clock::now() + 500ms] { return Clock::now() >= end; });
    const Trips quiet = round_trips(channel, counter, sent, [end = Clock::now() + std::chrono::duration<double>(quiet_seconds)] {
      return Clock::now() >= end;
    });
    // The floor: what any third busy process costs on this machine (the
    // worker is one, though at nice 10), for as long as the quiet phase.
    const pid_t hog = fork();
    if (hog == 0) {
      if (nice(10) == -1) _exit(1);
      volatile uint64_t spin = 0;
      for (;;) spin = spin + 1;
    }
    const Trips hogged = round_trips(channel, counter, sent, [end = Clock::now() + std::chrono::duration<double>(quiet_seconds)] {
      return Clock::now() >= end;
    });
    ::kill(hog, SIGKILL);
    waitpid(hog, nullptr, 0);
    // Peers that come and go without compiling anything.
    Trips churn;
    double churn_longest = -1;
    for (int peer = 0; peer < churn_peers; ++peer) {
      tc::test::Process visitor({argv[0], "--send", transport, "--port", port, "--what", "counter"});
      Trips trips = round_trips(channel, counter, sent, [&] { return !visitor.running(); });
      if (churn.us.empty()) churn.began = trips.began;
      // The longest of the peers' phases: where the merged phase's began.
      if (trips.at(1.0) > churn_longest) {
        churn_longest = trips.at(1.0);
        churn.longest_began = trips.longest_began;
      }
      churn.ended = trips.ended;
      churn.us.insert(churn.us.end(), trips.us.begin(), trips.us.end());
      const std::string said = visitor.read_rest(10000ms);
      if (said.find(": ran") == std::string::npos)
        throw std::runtime_error("a connecting peer's counter did not run: " + said);
    }
    tc::test::Process attacker({argv[0], "--send", transport, "--port", port, "--what", "heavy"});
    // Its arrival is measured above: round trips meanwhile go uncounted.
    (void)round_trips(channel, counter, sent, [&] {
      return attacker.read_line_starting("connected", 5ms).has_value() || !attacker.running();
    });
    const auto compile_start = Clock::now();
    const Trips during = round_trips(channel, counter, sent, [&] { return !attacker.running(); });
    const double compile_seconds = std::chrono::duration<double>(Clock::now() - compile_start).count();
    std::string said = attacker.read_rest(10000ms);
    if (const std::size_t at = said.find("sent:"); at != std::string::npos) said.erase(0, at);
    channel.close();
    const uint64_t counted = bench::attack_target_counter(target);
    if (counted != sent)
      throw std::runtime_error(fmt::format("the target counted {} of {} frames", counted, sent));
    const double worst_vs_p99 = during.at(1.0) / quiet.at(0.99);
    fmt::print("{} ({} tier): the second peer's code compiled for {:.1f} s ({})\n", transport, tier,
               compile_seconds, said.substr(0, said.find('\n')));
    fmt::print("  quiet   {} round trips: p50 {:.1f} us  p99 {:.1f} us  longest {:.1f} us\n",
               quiet.us.size(), quiet.at(0.5), quiet.at(0.99), quiet.at(1.0));
    fmt::print("  hog     {} round trips: p50 {:.1f} us  p99 {:.1f} us  longest {:.1f} us"
               "  (a spinning process at nice 10 beside it)\n",
               hogged.us.size(), hogged.at(0.5), hogged.at(0.99), hogged.at(1.0));
    fmt::print("  connect {} round trips: p50 {:.1f} us  p99 {:.1f} us  longest {:.1f} us"
               "  ({} peers connecting, running the counter once, leaving)\n",
               churn.us.size(), churn.at(0.5), churn.at(0.99), churn.at(1.0), churn_peers);
    fmt::print("  compile {} round trips: p50 {:.1f} us  p99 {:.1f} us  longest {:.1f} us\n",
               during.us.size(), during.at(0.5), during.at(0.99), during.at(1.0));
    fmt::print("  longest during the compile / quiet p99: {:.2f}x (goal: within 2x); "
               "p99 during / quiet p99: {:.2f}x; during the compile / hog: p99 {:.2f}x, "
               "longest {:.2f}x\n",
               worst_vs_p99, during.at(0.99) / quiet.at(0.99), during.at(0.99) / hogged.at(0.99),
               during.at(1.0) / hogged.at(1.0));
    if (!json.empty()) {
      std::ofstream out(json, std::ios::app);
      out << fmt::format(
          "{{\"bench\":\"compile_isolation\",\"transport\":\"{}\",\"tier\":\"{}\",\"bound\":{},"
          "\"compile_seconds\":{:.2f},"
          "\"quiet_trips\":{},\"quiet_p50_us\":{:.2f},\"quiet_p99_us\":{:.2f},\"quiet_max_us\":{:."
          "2f},"
          "\"compile_trips\":{},\"compile_p50_us\":{:.2f},\"compile_p99_us\":{:.2f},"
          "\"compile_max_us\":{:.2f},\"max_vs_quiet_p99\":{:.3f},\"hog_p99_us\":{:.2f},"
          "\"hog_max_us\":{:.2f},\"connect_peers\":{},\"connect_p99_us\":{:.2f},"
          "\"connect_max_us\":{:.2f},\"target_pid\":{},\"source_pid\":{},\"phases\":{{{},{},{},{}}}"
          "}}\n",
          transport, tier, bind, compile_seconds, quiet.us.size(), quiet.at(0.5), quiet.at(0.99),
          quiet.at(1.0), during.us.size(), during.at(0.5), during.at(0.99), during.at(1.0),
          worst_vs_p99, hogged.at(0.99), hogged.at(1.0), churn_peers, churn.at(0.99), churn.at(1.0),
          target.pid(), getpid(), phase_json("quiet", quiet), phase_json("hog", hogged),
          phase_json("connect", churn), phase_json("compile", during));
    }
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "threechains-bench-compile-isolation: %s\n", error.what());
  return 1;
}
