/* The chase's answer, run on the client: the link it ended on. */
#include <stddef.h>
#include <stdint.h>

size_t result_payload_bound(void* source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int result_payload_init(void* source_args, size_t source_args_size, void* payload,
                        size_t* payload_size) {
  (void)payload_size;
  if (source_args_size != sizeof(uint64_t)) return -1;
  *(uint64_t*)payload = *(const uint64_t*)source_args;
  return 0;
}

void result_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload_size;
  *(uint64_t*)target_args = *(const uint64_t*)payload;
}
