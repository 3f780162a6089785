/* The saxpy kernel in a module that also exports a function taking and
 * returning 256-bit vectors. How those are passed depends on the CPU features
 * (in ymm registers with AVX, in memory without), and code compiled elsewhere
 * fixed it: so the target must keep the features this module shipped with,
 * and its saxpy stays at the baseline's 128 bits. */
#include "../../benchmarks/kernels/saxpy.c"

typedef float float8 __attribute__((vector_size(32)));

float8 add8(float8 a, float8 b) { return a + b; }

void wide_main(void* payload, size_t payload_size, void* target_args) {
  saxpy_main(payload, payload_size, target_args);
}
