/* Same name as the counter ifunc (counter_main), different code: adds twice the
 * increment. Used to prove that new code under an old name is new code. */
#include <threechains/ifunc.h>

void counter_main(void* payload, size_t payload_size, void* target_args) {
  uint64_t increment = 1;
  if (payload_size >= sizeof(uint64_t)) increment = *(const uint64_t*)payload;
  *(volatile uint64_t*)target_args += 2 * increment;
}
