/* A GPU-only ifunc: y = a * x + y over the target's first two device
 * regions (x, then y, floats); the payload is `a`. */
#include <threechains/ifunc.h>

THREECHAINS_GPU_KERNEL void gpu_saxpy_main(void *payload, size_t payload_size,
                                           const threechains_device_regions *regions) {
  if (payload_size < sizeof(float) || regions->count < 2) return;
  const float a = *(const float *)payload;
  const float *x = (const float *)regions->region[0].base;
  float *y = (float *)regions->region[1].base;
  const size_t n = regions->region[1].bytes / sizeof(float);
  for (size_t i = threechains_gpu_index(); i < n; i += threechains_gpu_stride()) y[i] = a * x[i] + y[i];
}
