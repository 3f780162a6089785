/* A vectorisable kernel, shipped as an ifunc and also built by clang into the
 * benchmark: y = a*x + y over n floats, and a float dot product. With AVX2 the
 * loops run 8 floats per instruction, with AVX-512 16, with SSE2 only 4; which
 * one the target gets depends on whose CPU the middle end optimised for.
 *
 * saxpy_main runs `repeat` rounds of saxpy on the arrays the payload names
 * (target-side memory: the payload carries their addresses). */
#include <threechains/ifunc.h>

struct saxpy_request {
  float a;
  uint32_t repeat;
  uint64_t n;
  const float* x;
  float* y;
};

void saxpy(float a, const float* restrict x, float* restrict y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

float dot(const float* restrict x, const float* restrict y, size_t n) {
  float sum = 0.0f;
  /* Forced vectorisation lets the vectoriser reorder the float additions
   * (what -ffast-math would allow for the whole file). */
#pragma clang loop vectorize(enable) interleave(enable)
  for (size_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

void saxpy_main(void* payload, size_t payload_size, void* target_args) {
  (void)target_args;
  if (payload_size < sizeof(struct saxpy_request)) return;
  const struct saxpy_request* request = (const struct saxpy_request*)payload;
  for (uint32_t r = 0; r < request->repeat; ++r) saxpy(request->a, request->x, request->y, request->n);
}
