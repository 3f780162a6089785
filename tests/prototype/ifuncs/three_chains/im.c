/* Registered from bitcode in memory (ucp_register_ifunc_im) on both sides:
 * adds the payload's number to the target's sum. */
#include <stddef.h>
#include <stdint.h>

size_t im_payload_bound(void* source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(uint64_t);
}

int im_payload_init(void* source_args, size_t source_args_size, void* payload,
                    size_t* payload_size) {
  if (source_args_size != sizeof(uint64_t)) return -1;
  *(uint64_t*)payload = *(const uint64_t*)source_args;
  *payload_size = sizeof(uint64_t);
  return 0;
}

void im_main(void* payload, size_t payload_size, void* target_args) {
  if (payload_size == sizeof(uint64_t)) *(uint64_t*)target_args += *(const uint64_t*)payload;
}
