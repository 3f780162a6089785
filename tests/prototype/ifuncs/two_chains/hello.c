/* A first ifunc in Two-Chains' shape: payload_get_max_size, and payload_init
 * with the payload first. It ships a global and a helper function with it;
 * the target's check proves the payload was built in the right order. */
#include <stddef.h>
#include <stdint.h>

struct hello_result {
  uint64_t fib;          /* fib(17) + global: code and data came along */
  uint64_t payload_size; /* as the target saw it */
  uint64_t pattern_ok;   /* the payload holds the source's pattern */
};

uint64_t hello_global = 42;

static uint64_t fib(uint64_t n) {
  return n < 2 ? 1 : fib(n - 1) + fib(n - 2);
}

size_t hello_payload_get_max_size(void* source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return (size_t)(fib(17) + hello_global);
}

int hello_payload_init(void* payload, size_t payload_size, void* source_args,
                       size_t source_args_size) {
  const size_t n = source_args_size < payload_size ? source_args_size : payload_size;
  for (size_t i = 0; i < n; ++i) ((uint8_t*)payload)[i] = ((const uint8_t*)source_args)[i];
  return 0;
}

void hello_main(void* payload, size_t payload_size, void* target_args) {
  struct hello_result* result = (struct hello_result*)target_args;
  result->fib = fib(17) + hello_global;
  result->payload_size = payload_size;
  uint64_t ok = 1;
  for (size_t i = 0; i < payload_size; ++i)
    if (((const uint8_t*)payload)[i] != (uint8_t)(i * 7 + 1)) ok = 0;
  result->pattern_ok = ok;
}
