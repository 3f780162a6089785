#include <threechains/ifunc.h>

/* Adds the payload's value to the target's total. */
void adder_main(void* payload, size_t payload_size, void* target_args) {
  if (payload_size == sizeof(int64_t)) *(int64_t*)target_args += *(const int64_t*)payload;
}
