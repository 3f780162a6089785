// What the window tier's tests share: whether this host runs them (each
// skip says why), and saxpy's payload with its arrays in memory exposed to
// windows.
#pragma once

#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>

namespace threechains::test {

// The x86-64 checks of the window tier (machine code, %gs): true, after
// saying why, where they do not run. aarch64's run under qemu instead.
inline bool skip_without_x86_window_checks() {
#if defined(__x86_64__)
  return false;
#else
  WARN(
      "SKIP: these window-tier checks are x86-64's (aarch64's run under qemu: "
      "window.aarch64_runs_window_code)");
  return true;
#endif
}

// Checks that hold on any host with a window tier: true, after saying why,
// where there is none.
inline bool skip_without_window_tier() {
#if defined(__x86_64__) || defined(__aarch64__)
  return false;
#else
  WARN("SKIP: the window tier needs an x86-64 or aarch64 host");
  return true;
#endif
}

// tests/ifuncs/saxpy.c's payload: y = a * x + y, `repeat` times.
struct SaxpyRequest {
  float a;
  uint32_t repeat;
  uint64_t n;
  const float* x;
  float* y;
};

// x (read-only to confined code) and y (writable), `n` floats each, from
// cache.allocate_exposed: x[i] = i, y[i] = 1.
struct SaxpyArrays {
  float* x;
  float* y;
};
inline SaxpyArrays exposed_saxpy_arrays(JitCache& cache, std::size_t n) {
  auto* const x = reinterpret_cast<float*>(cache.allocate_exposed("x", n * 4, false).data());
  auto* const y = reinterpret_cast<float*>(cache.allocate_exposed("y", n * 4, true).data());
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0F;
  }
  return {x, y};
}

}  // namespace threechains::test
