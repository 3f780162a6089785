/* A GPU ifunc that imports what no GPU has: refused before it is compiled. */
#include <threechains/ifunc.h>

int system(const char *command);

THREECHAINS_GPU_KERNEL void gpu_imports_main(void *payload, size_t payload_size,
                                             const threechains_device_regions *regions) {
  (void)payload_size;
  (void)regions;
  system((const char *)payload);
}
