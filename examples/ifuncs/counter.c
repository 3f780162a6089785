/* The counter ifunc: adds the payload's increment (1 if the payload is empty)
 * to the 64-bit counter the target passes as target_args. No external symbols. */
#include <threechains/ifunc.h>

void counter_main(void* payload, size_t payload_size, void* target_args) {
  uint64_t increment = 1;
  if (payload_size >= sizeof(uint64_t)) increment = *(const uint64_t*)payload;
  *(volatile uint64_t*)target_args += increment;
}
