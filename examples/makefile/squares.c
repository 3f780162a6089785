/* An ifunc built by a Makefile: adds the square of the payload's value to the
 * 64-bit total the target passes as target_args. */
#include <threechains/ifunc.h>

void squares_main(void* payload, size_t payload_size, void* target_args) {
  if (payload_size != sizeof(int64_t)) return;
  const int64_t value = *(const int64_t*)payload;
  *(int64_t*)target_args += value * value;
}
