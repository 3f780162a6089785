// threechains-bench-jit: what turning a code section into an entry point costs
// on this host — the very first load in a process (JIT start-up included), and
// then repeated loads of code the JIT no longer holds (evict, load again), for
// each container given. Prints a table and one JSON line per container.
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <vector>

namespace tc = threechains;

int main(int argc, char** argv) {
  CLI::App app{"Measure JIT compile (bitcode) and link (binary) time of ifunc containers"};
  std::vector<std::string> containers;
  int repeats = 50;
  int codegen_level = 2;
  app.add_option("containers", containers, ".tcc files")->required();
  app.add_option("-r,--repeats", repeats, "evict + load rounds per container");
  app.add_option("-O,--codegen-level", codegen_level, "JIT codegen level 0..3");
  CLI11_PARSE(app, argc, argv);

  tc::JitCache cache({.codegen_level = codegen_level});
  fmt::print("{:<40} {:>8} {:>10} {:>10} {:>10} {:>10}\n", "container", "codec", "bytes",
             "first ms", "median us", "min us");
  for (const std::string& path : containers) {
    const tc::Ifunc ifunc = tc::Ifunc::load(path);
    const auto first = cache.load(ifunc.id(), ifunc.codec(), ifunc.code()).compile_time;
    std::vector<double> rounds;
    for (int i = 0; i < repeats; ++i) {
      (void)cache.evict(ifunc.id());
      rounds.push_back(std::chrono::duration<double, std::micro>(
                           cache.load(ifunc.id(), ifunc.codec(), ifunc.code()).compile_time)
                           .count());
    }
    std::sort(rounds.begin(), rounds.end());
    const double median = rounds.empty() ? 0 : rounds[rounds.size() / 2];
    const double best = rounds.empty() ? 0 : rounds.front();
    const double first_ms = std::chrono::duration<double, std::milli>(first).count();
    fmt::print("{:<40} {:>8} {:>10} {:>10.3f} {:>10.1f} {:>10.1f}\n",
               ifunc.name() + " (" + path.substr(path.rfind('/') + 1) + ")",
               tc::to_string(ifunc.codec()), ifunc.code().size(), first_ms, median, best);
    fmt::print(stderr,
               "{{\"bench\":\"jit_load\",\"container\":\"{}\",\"codec\":\"{}\",\"bytes\":{},"
               "\"first_ms\":{:.3f},"
               "\"median_us\":{:.1f},\"min_us\":{:.1f},\"codegen_level\":{}}}\n",
               path, tc::to_string(ifunc.codec()), ifunc.code().size(), first_ms, median, best,
               codegen_level);
  }
  return 0;
}
