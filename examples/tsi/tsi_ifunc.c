/* The TSI ifunc library, in the prototype's shape: the source builds the
 * payload (an increment) from its arguments; the target adds it to the
 * counter it passes as target_args. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef TSI_VARIANT
/* Another build of the same ifunc: the same behaviour, other code bytes. */
const char tsi_variant[] = "another build";
#endif

size_t tsi_payload_get_max_size(void* source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(uint64_t);
}

int tsi_payload_init(void* source_args, size_t source_args_size, void* payload,
                     size_t* payload_size) {
  if (source_args_size != sizeof(uint64_t)) return -1;
  memcpy(payload, source_args, sizeof(uint64_t));
  *payload_size = sizeof(uint64_t);
  return 0;
}

void tsi_main(void* payload, size_t payload_size, void* target_args) {
  if (payload_size < sizeof(uint64_t)) return;
  *(uint64_t*)target_args += *(const uint64_t*)payload;
}
