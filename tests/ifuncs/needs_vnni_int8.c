/* An ifunc with one function compiled for AVX-VNNI-INT8, which few x86 hosts
 * have, called only when the target says the CPU has it: a target
 * without it compiles that function as asked and runs the rest. */
#include <threechains/ifunc.h>

__attribute__((target("avxvnniint8"))) __attribute__((noinline)) int twice(int x) {
  return 2 * x;
}

void needs_vnni_int8_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload;
  (void)payload_size;
  /* Real code would ask the CPU (cpuid); here the target says, by a negative value. */
  if (*(int*)target_args < 0) *(int*)target_args = twice(-*(int*)target_args);
}
