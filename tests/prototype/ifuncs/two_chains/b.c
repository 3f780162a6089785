/* The benchmarks' near-empty ifunc, Two-Chains' shape: a payload of the size
 * asked for, which payload_init fills with a marker (so a call in the wrong
 * argument order cannot pass unseen); the target counts calls whose payload
 * carries it. */
#include <stddef.h>
#include <stdint.h>

size_t b_payload_get_max_size(void* source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int b_payload_init(void* payload, size_t payload_size, void* source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  for (size_t i = 0; i < payload_size; ++i) ((uint8_t*)payload)[i] = 0x5a;
  return 0;
}

void b_main(void* payload, size_t payload_size, void* target_args) {
  const uint8_t* bytes = (const uint8_t*)payload;
  if (payload_size > 0 && (bytes[0] != 0x5a || bytes[payload_size - 1] != 0x5a)) return;
  *(size_t*)target_args += 1;
}
