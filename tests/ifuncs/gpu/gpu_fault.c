/* A GPU-only ifunc that does what it is told: mark its payload (honest),
 * store through a wild pointer (a kernel fault), or never finish. */
#include <threechains/ifunc.h>

enum { HONEST = 0, WILD_STORE = 1, SPIN_FOREVER = 2 };

struct order {
  uint32_t what;
  uint32_t done; /* the honest kernel sets it; _complete-less, so only the GPU sees it */
};

THREECHAINS_GPU_KERNEL void gpu_fault_main(void *payload, size_t payload_size,
                                           const threechains_device_regions *regions) {
  (void)regions;
  if (payload_size < sizeof(struct order)) return;
  struct order *order = (struct order *)payload;
  if (order->what == WILD_STORE) {
    *(volatile uint64_t *)(uintptr_t)0x10 = 1;
  } else if (order->what == SPIN_FOREVER) {
    volatile uint32_t *what = &order->what;
    while (*what == SPIN_FOREVER) {
    }
  } else if (threechains_gpu_index() == 0) {
    order->done = 1;
  }
}
