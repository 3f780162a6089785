// Calls a loaded counter ifunc (examples/ifuncs/counter.c) in this process:
// once adding 7, once with no payload (adds 1). A working counter returns 8.
#pragma once

#include <threechains/jit_cache.hpp>

#include <cstdint>

namespace threechains::test {

inline uint64_t run_counter(IfuncMain entry) {
  uint64_t total = 0;
  uint64_t increment = 7;
  entry(&increment, sizeof(increment), &total);
  entry(nullptr, 0, &total);
  return total;
}

}  // namespace threechains::test
