/* Reads every word of its payload (GPU_ONLY): what a payload costs to reach
 * the GPU, mapped or copied (threechains-bench-gpu). */
#include <threechains/ifunc.h>

THREECHAINS_GPU_KERNEL void gpu_touch_main(void *payload, size_t payload_size,
                                           const threechains_device_regions *regions) {
  (void)regions;
  uint32_t *words = (uint32_t *)payload;
  const size_t n = payload_size / sizeof(uint32_t);
  uint32_t sum = 0;
  for (size_t i = threechains_gpu_index(); i < n; i += threechains_gpu_stride()) sum += words[i];
  if (sum == 0x9e3779b9u) words[0] = sum; /* never, in the benchmark: keeps the reads */
}
