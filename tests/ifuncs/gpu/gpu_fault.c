/* A GPU-only ifunc that does what it is told: mark its payload (honest),
 * store through a wild pointer (a kernel fault), never finish, or store at
 * an address it was given (device memory of the target's it was not given). */
#include <threechains/ifunc.h>

enum { HONEST = 0, WILD_STORE = 1, SPIN_FOREVER = 2, STORE_AT = 3 };

struct order {
  uint32_t what;
  uint32_t done;    /* the honest kernel sets it; _complete-less, so only the GPU sees it */
  uint64_t address; /* STORE_AT's */
};

THREECHAINS_GPU_KERNEL void gpu_fault_main(void *payload, size_t payload_size,
                                           const threechains_device_regions *regions) {
  (void)regions;
  if (payload_size < sizeof(struct order)) return;
  struct order *order = (struct order *)payload;
  if (order->what == WILD_STORE) {
    *(volatile uint64_t *)(uintptr_t)0x10 = 1;
  } else if (order->what == STORE_AT) {
    uint64_t *target = (uint64_t *)(uintptr_t)order->address;
    for (size_t i = threechains_gpu_index(); i < 512; i += threechains_gpu_stride()) target[i] = 0;
  } else if (order->what == SPIN_FOREVER) {
    volatile uint32_t *what = &order->what;
    while (*what == SPIN_FOREVER) {
    }
  } else if (threechains_gpu_index() == 0) {
    order->done = 1;
  }
}
