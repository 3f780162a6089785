/* A pointer chase: `steps` loads, each at the index the one before read.
 * Latency-bound, one load in flight: what a confinement shape adds to a
 * dependent load shows here undiluted (threechains-bench-window). */
#include <stdint.h>

uint64_t chase(const uint64_t* next, uint64_t at, uint64_t steps) {
  for (uint64_t s = 0; s < steps; ++s) at = next[at];
  return at;
}
