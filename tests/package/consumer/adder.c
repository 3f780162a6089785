#include <threechains/ifunc.h>

#include "adder.h"

/* Adds the payload's value, scaled (scale.c: a second source of this ifunc),
 * to the target's total. */
void adder_main(void* payload, size_t payload_size, void* target_args) {
  if (payload_size == sizeof(int64_t)) *(int64_t*)target_args += adder_scaled(*(const int64_t*)payload);
}
