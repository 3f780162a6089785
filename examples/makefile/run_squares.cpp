// Built by the Makefile next to it (no CMake): loads squares.tcc, which
// threechains-build made, and runs it the way a target does, through the JIT.
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <cstdio>

int main() {
  const threechains::Ifunc squares = threechains::Ifunc::load("squares.tcc");
  threechains::JitCache jit;
  const threechains::LoadResult loaded = jit.load(squares.id(), squares.codec(), squares.code());
  int64_t total = 0;
  for (int64_t i = 1; i <= 10; ++i) loaded.entry(&i, sizeof(i), &total);
  std::printf("run_squares: 1^2 + ... + 10^2 = %lld (expected 385), compiled for %s in %.2f ms\n",
              static_cast<long long>(total), loaded.triple.c_str(),
              static_cast<double>(loaded.compile_time.count()) / 1e6);
  return total == 385 ? 0 : 1;
}
