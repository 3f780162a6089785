/* The benchmarks' near-empty ifunc, Two-Chains' shape: a payload of the size
 * asked for, left as it is; the target counts calls. */
#include <stddef.h>

size_t b_payload_get_max_size(void* source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int b_payload_init(void* payload, size_t payload_size, void* source_args, size_t source_args_size) {
  (void)payload;
  (void)payload_size;
  (void)source_args;
  (void)source_args_size;
  return 0;
}

void b_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload;
  (void)payload_size;
  *(size_t*)target_args += 1;
}
