// threechains-bench-kernel: how fast JIT'd code runs next to clang's. The
// saxpy and dot kernels (benchmarks/kernels/saxpy.c) run, in one process and
// interleaved round by round, as
//   - clang -O2 for baseline x86-64 (what a generic build gives),
//   - clang -O2 -march=native (the best a user who builds on the host gets),
//   - JIT'd from each shipped container at each optimisation level given
//     (0: code generation only, the shipped IR as it is; 2: LLVM's O2 pipeline
//     on the target, with the target's CPU).
// Prints ns per element and the ratio to both clang builds; one JSON line per
// variant to stderr. Every variant's results are checked against the baseline.
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

namespace tc = threechains;

// The same source, built into this program by clang (benchmarks/CMakeLists.txt).
extern "C" {
void saxpy_clang_baseline(float a, const float* x, float* y, std::size_t n);
float dot_clang_baseline(const float* x, const float* y, std::size_t n);
void saxpy_clang_native(float a, const float* x, float* y, std::size_t n);
float dot_clang_native(const float* x, const float* y, std::size_t n);
}

namespace {

using SaxpyFn = void (*)(float, const float*, float*, std::size_t);
using DotFn = float (*)(const float*, const float*, std::size_t);

struct Variant {
  std::string name;
  SaxpyFn saxpy = nullptr;
  DotFn dot = nullptr;
  std::size_t container_bytes = 0;
  double load_ms = 0;
  std::vector<double> saxpy_ns;  // per element, one per round
  std::vector<double> dot_ns;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

template <class F>
double ns_per_element(F&& run, int calls, std::size_t n) {
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < calls; ++c) run();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() /
         (static_cast<double>(calls) * static_cast<double>(n));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"JIT'd kernels vs clang -O2 (baseline) and clang -O2 -march=native"};
  std::vector<std::string> containers;
  std::vector<int> levels{0, 2};
  std::size_t n = 4096;
  int rounds = 21;
  int calls = 400;
  app.add_option("containers", containers, "saxpy containers (.tcc), bitcode or binary")
      ->required();
  app.add_option("-O,--levels", levels, "JIT optimisation levels to run each bitcode container at");
  app.add_option("-n,--elements", n, "floats per array (4096: both arrays in L1)");
  app.add_option("-r,--rounds", rounds, "rounds (variants interleaved in each)");
  app.add_option("-c,--calls", calls, "kernel calls per variant per round");
  CLI11_PARSE(app, argc, argv);

  std::vector<Variant> variants;
  variants.push_back({"clang -O2 (baseline x86-64)", saxpy_clang_baseline, dot_clang_baseline});
  variants.push_back({"clang -O2 -march=native", saxpy_clang_native, dot_clang_native});
  std::vector<std::unique_ptr<tc::JitCache>> caches;  // the JIT'd code lives as long as these
  for (const std::string& path : containers) {
    const tc::Ifunc ifunc = tc::Ifunc::load(path);
    const std::string file = path.substr(path.rfind('/') + 1);
    for (const int level : levels) {
      if (ifunc.codec() == tc::CodecId::binary && level != levels.front()) continue;
      auto& cache = caches.emplace_back(
          std::make_unique<tc::JitCache>(tc::JitOptions{.optimisation_level = level}));
      // The second load is the one reported: the first in a process also
      // starts LLVM up.
      (void)cache->load(ifunc.id(), ifunc.codec(), ifunc.code());
      (void)cache->evict(ifunc.id());
      const tc::LoadResult loaded = cache->load(ifunc.id(), ifunc.codec(), ifunc.code());
      Variant variant;
      variant.name = ifunc.codec() == tc::CodecId::binary
                         ? fmt::format("JIT {} (object)", file)
                         : fmt::format("JIT {} at O{}", file, level);
      variant.saxpy = reinterpret_cast<SaxpyFn>(cache->lookup(ifunc.id(), "saxpy"));
      variant.dot = reinterpret_cast<DotFn>(cache->lookup(ifunc.id(), "dot"));
      variant.container_bytes = ifunc.code().size();
      variant.load_ms = std::chrono::duration<double, std::milli>(loaded.compile_time).count();
      if (variant.saxpy == nullptr || variant.dot == nullptr) {
        fmt::print(stderr, "{}: no saxpy/dot symbol\n", path);
        return 1;
      }
      variants.push_back(std::move(variant));
    }
  }

  // Same inputs for everyone; results checked against the baseline build.
  std::vector<float> x(n);
  std::vector<float> y(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = 1.0f + static_cast<float>(i % 17) * 0.25f;
  std::vector<float> reference(n, 0.5f);
  saxpy_clang_baseline(0.75f, x.data(), reference.data(), n);
  const float reference_dot = dot_clang_baseline(x.data(), reference.data(), n);
  for (const Variant& v : variants) {
    std::vector<float> out(n, 0.5f);
    v.saxpy(0.75f, x.data(), out.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      if (std::fabs(out[i] - reference[i]) > 1e-5f * std::fabs(reference[i])) {
        fmt::print(stderr, "{}: saxpy result {} differs: {} vs {}\n", v.name, i, out[i],
                   reference[i]);
        return 1;
      }
    }
    const float d = v.dot(x.data(), out.data(), n);
    if (std::fabs(d - reference_dot) > 1e-4f * std::fabs(reference_dot)) {
      fmt::print(stderr, "{}: dot {} differs from {}\n", v.name, d, reference_dot);
      return 1;
    }
  }

  volatile float sink = 0;
  for (int round = 0; round < rounds; ++round) {
    for (Variant& v : variants) {
      std::fill(y.begin(), y.end(), 0.5f);
      v.saxpy_ns.push_back(
          ns_per_element([&] { v.saxpy(1e-7f, x.data(), y.data(), n); }, calls, n));
      v.dot_ns.push_back(
          ns_per_element([&] { sink = sink + v.dot(x.data(), y.data(), n); }, calls, n));
    }
  }

  const double base_saxpy = median(variants[0].saxpy_ns);
  const double base_dot = median(variants[0].dot_ns);
  const double native_saxpy = median(variants[1].saxpy_ns);
  const double native_dot = median(variants[1].dot_ns);
  fmt::print(
      "{} floats, {} rounds x {} calls; ns per element (median), speed-up over baseline, "
      "speed relative to -march=native\n",
      n, rounds, calls);
  fmt::print("{:<48} {:>9} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9}\n", "variant", "saxpy ns",
             "x base", "/native", "dot ns", "x base", "/native", "bytes", "load ms");
  for (const Variant& v : variants) {
    const double s = median(v.saxpy_ns);
    const double d = median(v.dot_ns);
    fmt::print("{:<48} {:>9.4f} {:>8.2f} {:>8.2f} {:>9.4f} {:>8.2f} {:>8.2f} {:>8} {:>9.2f}\n",
               v.name, s, base_saxpy / s, native_saxpy / s, d, base_dot / d, native_dot / d,
               v.container_bytes, v.load_ms);
    fmt::print(stderr,
               "{{\"bench\":\"kernel\",\"variant\":\"{}\",\"elements\":{},\"saxpy_ns\":{:.4f},"
               "\"dot_ns\":{:.4f},\"saxpy_vs_baseline\":{:.3f},\"saxpy_vs_native\":{:.3f},"
               "\"dot_vs_baseline\":{:.3f},\"dot_vs_native\":{:.3f},\"container_bytes\":{},"
               "\"load_ms\":{:.3f}}}\n",
               v.name, n, s, d, base_saxpy / s, native_saxpy / s, base_dot / d, native_dot / d,
               v.container_bytes, v.load_ms);
  }
  return sink == -1.0f ? 1 : 0;  // keeps the dot results alive
}
