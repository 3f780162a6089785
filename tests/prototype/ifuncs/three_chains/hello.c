/* A first ifunc in Three-Chains' shape: payload_bound, and payload_init with
 * the source arguments first and the payload size by pointer. It prints, as
 * the prototype's does (printf is allowed only where the operator allows it:
 * THREECHAINS_IFUNC_ALLOW_IMPORTS=printf), and reports to the target. Its
 * second printf is one LLVM's optimiser likes to make a puts: the target's
 * optimiser must not, where only printf binds. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct hello_result {
  uint64_t fib;
  uint64_t payload_size;
  uint64_t pattern_ok;
};

uint64_t hello_global = 42;

static uint64_t fib(uint64_t n) {
  return n < 2 ? 1 : fib(n - 1) + fib(n - 2);
}

size_t hello_payload_bound(void* source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return (size_t)(fib(17) + hello_global);
}

int hello_payload_init(void* source_args, size_t source_args_size, void* payload,
                       size_t* payload_size) {
  const size_t n = source_args_size < *payload_size ? source_args_size : *payload_size;
  for (size_t i = 0; i < n; ++i) ((uint8_t*)payload)[i] = ((const uint8_t*)source_args)[i];
  *payload_size = n;
  return 0;
}

void hello_main(void* payload, size_t payload_size, void* target_args) {
  struct hello_result* result = (struct hello_result*)target_args;
  printf("Hello: payload_size %zu, fib(17) + 42 = %llu\n", payload_size,
         (unsigned long long)(fib(17) + hello_global));
  printf("Hello: done\n");
  result->fib = fib(17) + hello_global;
  result->payload_size = payload_size;
  uint64_t ok = 1;
  for (size_t i = 0; i < payload_size; ++i)
    if (((const uint8_t*)payload)[i] != (uint8_t)(i * 7 + 1)) ok = 0;
  result->pattern_ok = ok;
}
