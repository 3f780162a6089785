/* Valid IR that LLVM's code generator cannot lower in reasonable time: a
 * multiplication of integers 65536 bits wide (clang's _BitInt), which
 * legalisation expands into millions of operations. Confined, it must be
 * refused before anything compiles it; the target serves on. */
#include <threechains/ifunc.h>

#include <string.h>

typedef unsigned _BitInt(65536) huge;

void evil_wide_main(void* payload, size_t payload_size, void* target_args) {
  uint64_t seed = 0;
  if (payload_size >= sizeof(seed)) memcpy(&seed, payload, sizeof(seed));
  huge x = ((huge)seed << 60000) | seed;
  x = x * x;
  *(uint64_t*)target_args += (uint64_t)(x >> 64000);
}
