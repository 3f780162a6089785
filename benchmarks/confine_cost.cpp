// threechains-bench-confine: what confinement costs the code it confines.
// The same bitcode is loaded twice in one process, into two JitCaches: as it
// is (a fully trusted signer) and confined (allow_code_signer). Interleaved
// round by round, it measures
//   - a call of the counter ifunc (examples/ifuncs/counter.c): the fixed cost
//     of an invocation (the runner's setjmp and state, the prologue's checks);
//   - saxpy over arrays the target exposes (benchmarks/kernels/saxpy.c): the
//     cost of a bounds check per access in a vectorised loop;
// and prints each confined figure as a multiple of the unconfined one, one
// JSON line per figure to --json (or stderr). Also the counter's first load
// each way (once: the confined one includes starting the compile worker).
// A third JitCache runs the same code in the window tier
// (ConfinementOptions::window_tier; measured on x86-64), its counter and arrays in
// memory exposed to windows (JitCache::allocate_exposed); its figures are
// printed beside, as multiples of the unconfined ones.
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include "bench_util.hpp"

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace tc = threechains;

namespace {

struct SaxpyRequest {  // benchmarks/kernels/saxpy.c
  float a;
  uint32_t repeat;
  uint64_t n;
  const float* x;
  float* y;
};

struct Loaded {
  tc::JitCache cache;
  const tc::CachedIfunc* counter = nullptr;
  const tc::CachedIfunc* saxpy = nullptr;
};

tc::JitOptions options(bool window_tier = false) {
  tc::JitOptions o;
  o.tiering = tc::Tiering::ir_only;
  o.confinement.window_tier = window_tier;
  return o;
}

template <class F>
double ns_per(F&& run, int calls) {
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < calls; ++c) run();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() /
         calls;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"confined vs unconfined: the same bitcode, per call and per element"};
  int rounds = 11;
  int calls = 200000;
  std::size_t n = 4096;
  std::string json;
  app.add_option("-r,--rounds", rounds, "rounds (both variants interleaved in each)");
  app.add_option("-c,--calls", calls, "counter calls per variant per round");
  app.add_option("-n,--elements", n, "floats per saxpy array");
  app.add_option("--json", json, "append one JSON line per figure to this file");
  CLI11_PARSE(app, argc, argv);

  const tc::Ifunc counter = tc::Ifunc::load(THREECHAINS_BENCH_BITCODE);
  const tc::Ifunc saxpy = tc::Ifunc::load(THREECHAINS_BENCH_SAXPY);
  std::vector<float> x(n, 1.5F);
  std::vector<float> y_plain(n, 0.0F);
  std::vector<float> y_confined(n, 0.0F);
  uint64_t count_plain = 0;
  uint64_t count_confined = 0;

  Loaded plain{tc::JitCache(options())};
  Loaded confined{tc::JitCache(options())};
  Loaded windowed{tc::JitCache(options(true))};
  // First loads of the counter: unconfined it compiles in this process,
  // confined in a compile worker started for it (LLVM's start included).
  double load_plain_ms = 0;
  double load_confined_ms = 0;
  double load_windowed_ms = 0;
  for (auto [loaded, mode, took] : {std::tuple{&plain, tc::Confine::no, &load_plain_ms},
                                    {&confined, tc::Confine::yes, &load_confined_ms},
                                    {&windowed, tc::Confine::yes, &load_windowed_ms}}) {
    const auto load_started = std::chrono::steady_clock::now();
    (void)loaded->cache.load(counter.id(), counter.codec(), counter.code(), mode);
    *took =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_started)
            .count();
    (void)loaded->cache.load(saxpy.id(), saxpy.codec(), saxpy.code(), mode);
    loaded->counter = loaded->cache.find_ifunc(counter.id());
    loaded->saxpy = loaded->cache.find_ifunc(saxpy.id());
  }
  const auto bytes = [](auto& v) {
    return std::span<std::byte>(reinterpret_cast<std::byte*>(v.data()), v.size() * sizeof(v[0]));
  };
  confined.cache.expose({{"x", bytes(x), false},
                         {"y", bytes(y_confined), true},
                         {"counter", {reinterpret_cast<std::byte*>(&count_confined), 8}, true}});
  // The window tier's data where windows see it.
  const bool in_window =
      windowed.cache.in_window(*windowed.counter) && windowed.cache.in_window(*windowed.saxpy);
  auto* const x_windowed =
      reinterpret_cast<float*>(windowed.cache.allocate_exposed("x", n * 4, false).data());
  auto* const y_windowed =
      reinterpret_cast<float*>(windowed.cache.allocate_exposed("y", n * 4, true).data());
  auto* const count_windowed =
      reinterpret_cast<uint64_t*>(windowed.cache.allocate_exposed("counter", 8, true).data());
  std::copy(x.begin(), x.end(), x_windowed);

  const int saxpy_calls = std::max(1, calls / static_cast<int>(n / 64 + 1));
  std::vector<double> call_plain, call_confined, saxpy_plain, saxpy_confined, call_windowed,
      saxpy_windowed;
  for (int r = 0; r < rounds; ++r) {
    alignas(16) uint64_t one = 1;
    call_plain.push_back(ns_per(
        [&] { (void)plain.cache.invoke(*plain.counter, &one, sizeof(one), &count_plain); }, calls));
    call_confined.push_back(ns_per(
        [&] {
          if (confined.cache.invoke(*confined.counter, &one, sizeof(one), &count_confined))
            throw std::runtime_error("the confined counter trapped");
        },
        calls));
    call_windowed.push_back(ns_per(
        [&] {
          if (windowed.cache.invoke(*windowed.counter, &one, sizeof(one), count_windowed))
            throw std::runtime_error("the windowed counter trapped");
        },
        calls));
    alignas(16) SaxpyRequest windowed_request{0.5F, 1, n, x_windowed, y_windowed};
    saxpy_windowed.push_back(ns_per(
                                 [&] {
                                   if (windowed.cache.invoke(*windowed.saxpy, &windowed_request,
                                                             sizeof(windowed_request), nullptr))
                                     throw std::runtime_error("the windowed saxpy trapped");
                                 },
                                 saxpy_calls) /
                             static_cast<double>(n));
    alignas(16) SaxpyRequest plain_request{0.5F, 1, n, x.data(), y_plain.data()};
    alignas(16) SaxpyRequest confined_request{0.5F, 1, n, x.data(), y_confined.data()};
    saxpy_plain.push_back(ns_per(
                              [&] {
                                (void)plain.cache.invoke(*plain.saxpy, &plain_request,
                                                         sizeof(plain_request), nullptr);
                              },
                              saxpy_calls) /
                          static_cast<double>(n));
    saxpy_confined.push_back(ns_per(
                                 [&] {
                                   if (confined.cache.invoke(*confined.saxpy, &confined_request,
                                                             sizeof(confined_request), nullptr))
                                     throw std::runtime_error("the confined saxpy trapped");
                                 },
                                 saxpy_calls) /
                             static_cast<double>(n));
  }
  if (count_plain != count_confined || y_plain != y_confined || count_plain != *count_windowed ||
      !std::equal(y_plain.begin(), y_plain.end(), y_windowed)) {
    std::fprintf(stderr, "confined and unconfined results differ\n");
    return 1;
  }
  struct Figure {
    const char* name;
    const char* unit;
    double plain;
    double confined;
    double windowed;
  };
  const Figure figures[] = {
      {"counter call", "ns/call", bench::median(call_plain), bench::median(call_confined),
       bench::median(call_windowed)},
      {"saxpy", "ns/element", bench::median(saxpy_plain), bench::median(saxpy_confined),
       bench::median(saxpy_windowed)},
      {"counter load", "ms", load_plain_ms, load_confined_ms, load_windowed_ms},
  };
  fmt::print("{:<14} {:>12} {:>12} {:>8} {:>12} {:>8}  ({} rounds, median; n = {}{})\n", "",
             "unconfined", "checked", "ratio", "window", "ratio", rounds, n,
             in_window ? "" : "; NOT in the window tier: this build or CPU has none");
  std::FILE* out = json.empty() ? stderr : std::fopen(json.c_str(), "a");
  for (const Figure& f : figures) {
    fmt::print("{:<14} {:>9.3f} {:<2} {:>9.3f} {:<2} {:>7.2f}x {:>9.3f} {:<2} {:>7.2f}x\n", f.name,
               f.plain, "", f.confined, "", f.confined / f.plain, f.windowed, "",
               f.windowed / f.plain);
    fmt::print(out,
               "{{\"bench\":\"confine\",\"figure\":\"{}\",\"unit\":\"{}\",\"unconfined\":{:.4f},"
               "\"confined\":{:.4f},\"ratio\":{:.3f},\"window\":{:.4f},\"window_ratio\":{:.3f},"
               "\"in_window\":{},\"rounds\":{},\"n\":{}}}\n",
               f.name, f.unit, f.plain, f.confined, f.confined / f.plain, f.windowed,
               f.windowed / f.plain, in_window, rounds, n);
  }
  if (out != stderr) std::fclose(out);
  return 0;
}
