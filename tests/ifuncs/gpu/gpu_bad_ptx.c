/* A GPU ifunc whose PTX the driver cannot assemble: its JIT error, with the
 * driver's log, must reach the source. */
#include <threechains/ifunc.h>

THREECHAINS_GPU_KERNEL void gpu_bad_ptx_main(void *payload, size_t payload_size,
                                             const threechains_device_regions *regions) {
  (void)payload;
  (void)payload_size;
  (void)regions;
  __asm__ volatile("no.such.instruction;");
}
