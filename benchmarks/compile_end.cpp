// threechains-bench-compile-end: what the thread that serves frames does for
// one confined load, the work no other core can take from it (issue 32).
//
// A Receiver's loop hands confined code to JitCache::start_load and then
// calls finish_loads between dispatches; the compile runs in a worker
// process, but the steps around it run on the serving thread: starting the
// worker, reaping it and reading its object, linking the object (JITLink),
// handing it to the window verifier, and entering the verdict. Each call
// stalls every other peer for as long as it takes. On a machine with a free
// core for the worker this is the floor of an honest peer's longest round
// trip during another peer's compile (threechains-bench-compile-isolation).
//
// Each round evicts the code and loads it again, as a Receiver does, with
// finish_loads called every 200 us; it reports the serving thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID, so the scheduler's noise is not counted) in
// start_load, in the longest finish_loads call, and in all calls together.
// Side by side, in the same run: the same counter as machine code linked
// unconfined, what a load from a peer trusted with native code costs the
// same thread. Back to back the caches are warm; after a long compile they
// are not: --cold-mib writes that much memory before each load (untimed),
// to push the loads' code and data out of the CPU's caches. One JSON line
// per case to --json.
#include <threechains/threechains.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace threechains;

double thread_cpu_us() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e6 + static_cast<double>(now.tv_nsec) / 1e3;
}

// Each figure as the thread's CPU time and as the wall clock: a call can
// also stall its thread without using CPU (posix_spawn waits while the
// worker's child execs; the scheduler may run something else).
struct Load {
  double start_us = 0;         // start_load
  double longest_us = 0;       // the longest finish_loads call
  double total_us = 0;         // start_load and every finish_loads call
  double start_wall_us = 0;    // start_load
  double longest_wall_us = 0;  // the finish_loads call longest on the wall clock
  int calls = 0;               // finish_loads calls until it was answered
};

double wall_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Case {
  std::string name;
  std::vector<Load> loads;
};

// One confined load as a Receiver's loop makes it; throws if it is refused.
Load confined_load(JitCache& cache, const Ifunc& ifunc) {
  Load load;
  double begin = thread_cpu_us();
  double begin_wall = wall_us();
  if (cache.start_load(ifunc.id(), ifunc.codec(), ifunc.code(), Confine::yes))
    throw Error(errc::jit_failed, "'" + ifunc.name() + "' loaded at once, not by a worker");
  load.start_us = thread_cpu_us() - begin;
  load.start_wall_us = wall_us() - begin_wall;
  load.total_us = load.start_us;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  for (;;) {
    begin = thread_cpu_us();
    begin_wall = wall_us();
    std::vector<JitCache::FinishedLoad> finished = cache.finish_loads();
    const double took = thread_cpu_us() - begin;
    load.longest_wall_us = std::max(load.longest_wall_us, wall_us() - begin_wall);
    ++load.calls;
    load.longest_us = std::max(load.longest_us, took);
    load.total_us += took;
    if (!finished.empty()) {
      if (finished.front().error) throw *finished.front().error;
      return load;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(errc::timeout, "'" + ifunc.name() + "' did not load in 2 minutes");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// The same thread's cost of a native load: one call, linked at once.
Load native_load(JitCache& cache, const Ifunc& ifunc) {
  Load load;
  const double begin = thread_cpu_us();
  const double begin_wall = wall_us();
  (void)cache.load(ifunc.id(), ifunc.codec(), ifunc.code(), Confine::no);
  load.start_us = load.longest_us = load.total_us = thread_cpu_us() - begin;
  load.start_wall_us = load.longest_wall_us = wall_us() - begin_wall;
  return load;
}

// Writes `bytes` of memory: what a long compile beside the serving thread
// leaves of its caches, roughly.
void chill(std::vector<unsigned char>& sweep) {
  for (std::size_t at = 0; at < sweep.size(); at += 64) sweep[at] = static_cast<unsigned char>(at);
  asm volatile("" : : "r"(sweep.data()) : "memory");
}

double median_of(const std::vector<Load>& loads, double Load::*field) {
  std::vector<double> values;
  for (const Load& load : loads) values.push_back(load.*field);
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

double max_of(const std::vector<Load>& loads, double Load::*field) {
  double most = 0;
  for (const Load& load : loads) most = std::max(most, load.*field);
  return most;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"threechains-bench-compile-end: the serving thread's share of a confined load"};
  int rounds = 20;
  bool heavy = true;
  int heavy_compiles = 0;
  std::string json;
  std::size_t cold_mib = 0;
  std::vector<int> helper_cpus;
  app.add_option("--helper-cpus", helper_cpus,
                 "JitOptions::helper_cpus of every cache (run the benchmark itself elsewhere, with "
                 "taskset)");
  app.add_option("--cold-mib", cold_mib,
                 "write this many MiB before each load (untimed): cold caches");
  app.add_option("-r,--rounds", rounds, "loads per case (evicted between)")
      ->check(CLI::PositiveNumber);
  app.add_flag("!--no-heavy", heavy, "leave out heavy (its first load compiles for seconds)");
  app.add_option(
      "--heavy-compiles", heavy_compiles,
      "also compile heavy this many times (seconds each): its object (about 260 KB) read "
      "and linked after a worker's compile, as a Receiver's load does");
  app.add_option("--json", json, "append one JSON line per case");
  CLI11_PARSE(app, argc, argv);

  const Ifunc counter = Ifunc::load(THREECHAINS_BENCH_BITCODE);
  const Ifunc counter_binary = Ifunc::load(THREECHAINS_BENCH_BINARY);
  const std::filesystem::path store = std::filesystem::temp_directory_path() /
                                      ("threechains-bench-compile-end-" + std::to_string(getpid()));
  std::vector<Case> cases;
  try {
    JitOptions options;
    options.helper_cpus = helper_cpus;
    JitCache native(options);
    JitCache compiling(options);  // no store: every load is a worker's compile
    JitOptions stored_options = options;
    stored_options.code_cache_directory = store.string();
    stored_options.confinement.compile_time_limit = std::chrono::seconds(60);
    JitCache stored(stored_options);
    std::optional<Ifunc> heavy_code;
    if (heavy) {
      heavy_code = Ifunc::load(THREECHAINS_BENCH_HEAVY);
      fmt::print("heavy: its first load compiles (seconds) and fills the code store\n");
      (void)confined_load(stored, *heavy_code);
    }
    cases = {{"counter, native link (machine code, unconfined)", {}},
             {"counter, compiled by a worker (window tier)", {}},
             {"heavy, from the code store (window tier)", {}},
             {"heavy, compiled by a worker (window tier)", {}}};
    JitOptions heavy_options = options;  // no store: a compile each time
    heavy_options.confinement.compile_time_limit = std::chrono::seconds(60);
    JitCache heavy_compiling(heavy_options);
    std::vector<unsigned char> sweep(cold_mib << 20);
    for (int round = 0; round < rounds; ++round) {  // the cases take turns
      (void)native.evict(counter_binary.id());
      chill(sweep);
      cases[0].loads.push_back(native_load(native, counter_binary));
      (void)compiling.evict(counter.id());
      chill(sweep);
      cases[1].loads.push_back(confined_load(compiling, counter));
      if (heavy_code) {
        (void)stored.evict(heavy_code->id());
        chill(sweep);
        cases[2].loads.push_back(confined_load(stored, *heavy_code));
      }
      if (heavy_code && round < heavy_compiles) {
        (void)heavy_compiling.evict(heavy_code->id());
        chill(sweep);
        cases[3].loads.push_back(confined_load(heavy_compiling, *heavy_code));
      }
    }
  } catch (const Error& error) {
    std::filesystem::remove_all(store);
    fmt::print(stderr, "threechains-bench-compile-end: {}\n", error.what());
    return 1;
  }
  std::filesystem::remove_all(store);

  const double native_total = median_of(cases[0].loads, &Load::total_us);
  fmt::print(
      "the serving thread's CPU time per load, us (median of {} rounds; {}; longest max: "
      "the most in one call)\n",
      rounds, cold_mib == 0 ? "warm" : fmt::format("{} MiB written before each", cold_mib));
  fmt::print("{:<50} {:>11} {:>13} {:>12} {:>9} {:>10} | wall: {:>10} {:>13}\n", "case",
             "start_load", "longest call", "longest max", "all", "/ native", "start_load",
             "longest call");
  for (const Case& c : cases) {
    if (c.loads.empty()) continue;
    const double total = median_of(c.loads, &Load::total_us);
    fmt::print(
        "{:<50} {:>11.1f} {:>13.1f} {:>12.1f} {:>9.1f} {:>9.2f}x | wall: {:>10.1f} {:>13.1f}\n",
        c.name, median_of(c.loads, &Load::start_us), median_of(c.loads, &Load::longest_us),
        max_of(c.loads, &Load::longest_us), total, total / native_total,
        median_of(c.loads, &Load::start_wall_us), median_of(c.loads, &Load::longest_wall_us));
    if (!json.empty()) {
      std::ofstream out(json, std::ios::app);
      out << fmt::format(
          "{{\"bench\":\"compile_end\",\"case\":\"{}\",\"rounds\":{},\"cold_mib\":{},"
          "\"start_load_us\":{:.1f},\"longest_call_us\":{:.1f},\"longest_call_max_us\":{:.1f},"
          "\"total_us\":{:.1f},\"total_over_native\":{:.2f},\"start_load_wall_us\":{:.1f},"
          "\"longest_call_wall_us\":{:.1f}}}\n",
          c.name, rounds, cold_mib, median_of(c.loads, &Load::start_us),
          median_of(c.loads, &Load::longest_us), max_of(c.loads, &Load::longest_us), total,
          total / native_total, median_of(c.loads, &Load::start_wall_us),
          median_of(c.loads, &Load::longest_wall_us));
    }
  }
  return 0;
}
