/* An ifunc in the prototype's C style: the source builds the payload with
 * greeter_payload_init, the target's greeter_main sums its bytes. */
#include <threechains/ifunc.h>

#include <string.h>

size_t greeter_payload_get_max_size(void* source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size + 8;
}

/* Payload: u64 length, then the source args' bytes. */
int greeter_payload_init(void* source_args, size_t source_args_size, void* payload,
                         size_t* payload_size) {
  if (*payload_size < source_args_size + 8) return -1;
  uint64_t length = source_args_size;
  memcpy(payload, &length, 8);
  memcpy((char*)payload + 8, source_args, source_args_size);
  *payload_size = source_args_size + 8;
  return 0;
}

void greeter_main(void* payload, size_t payload_size, void* target_args) {
  uint64_t length;
  if (payload_size < 8) return;
  memcpy(&length, payload, 8);
  if (length + 8 != payload_size) return;
  const unsigned char* bytes = (const unsigned char*)payload + 8;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < length; ++i) sum += bytes[i];
  *(uint64_t*)target_args += sum;
}
