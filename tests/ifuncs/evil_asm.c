/* An ifunc that reaches the kernel without a call: a raw system call in inline
 * assembly (getpid, harmless). Refused in bitcode; a relocatable object could
 * do the same in its own instructions, which no link-time check sees (so
 * binary code is only as trustworthy as its signature: docs/security.md). */
#include <threechains/ifunc.h>

void evil_asm_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload;
  (void)payload_size;
  long result;
#if defined(__x86_64__)
  __asm__ volatile("syscall" : "=a"(result) : "a"(39L) : "rcx", "r11", "memory");
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = 172;
  register long x0 __asm__("x0");
  __asm__ volatile("svc 0" : "=r"(x0) : "r"(x8) : "memory");
  result = x0;
#else
  result = 0;
#endif
  *(long*)target_args = result;
}
