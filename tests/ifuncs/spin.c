/* The spin ifunc: enough work in one named function for a profiler's samples
 * and a debugger's breakpoint to land in (tests/test_observe.cpp). Runs the
 * payload's number of xorshift steps and adds the result to the 64-bit word at
 * target_args. */
#include <threechains/ifunc.h>

__attribute__((noinline)) static uint64_t spin_steps(uint64_t state, uint64_t steps) {
  for (uint64_t i = 0; i < steps; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
  }
  return state;
}

void spin_main(void* payload, size_t payload_size, void* target_args) {
  uint64_t steps = 1;
  if (payload_size >= sizeof(uint64_t)) steps = *(const uint64_t*)payload;
  *(volatile uint64_t*)target_args += spin_steps(0x9e3779b97f4a7c15ull, steps);
}
