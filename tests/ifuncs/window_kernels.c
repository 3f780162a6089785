/* Honest kernels in the forms the window shape first refused, one per
 * container (KERNEL picks it): a recursive function, a local array indexed
 * by data, loops the optimiser turns into memcpy and memset, and locals
 * too large for a window's frames. Each
 * reads its input from the payload and writes its answer to target_args
 * (at least 64 words). tests/test_window_tier.cpp runs each confined in the
 * window tier and unconfined, and compares. */
#include <threechains/ifunc.h>

#if KERNEL == 0
/* Recursion: the sum of the payload's words by halves. */
static uint64_t sum_halves(const uint64_t* words, size_t n) {
  if (n == 0) return 0;
  if (n == 1) return words[0] * 3 + 1;
  return sum_halves(words, n / 2) + sum_halves(words + n / 2, n - n / 2);
}
void window_kernel_main(void* payload, size_t size, void* target_args) {
  uint64_t* out = (uint64_t*)target_args;
  out[0] = sum_halves((const uint64_t*)payload, size / 8);
}
#elif KERNEL == 1
/* A local array indexed by data: a histogram of the payload's bytes by
 * their low four bits, then each bin weighted by its neighbours. */
void window_kernel_main(void* payload, size_t size, void* target_args) {
  uint64_t bins[16];
  for (int b = 0; b < 16; ++b) bins[b] = 0;
  const unsigned char* bytes = (const unsigned char*)payload;
  for (size_t k = 0; k < size; ++k) bins[bytes[k] & 15] += bytes[k];
  uint64_t* out = (uint64_t*)target_args;
  for (int b = 0; b < 16; ++b) out[b] = bins[b] * 2 + bins[(b + 1) & 15] + bins[(b + 15) & 15];
}
#elif KERNEL == 2
/* A copy loop (memcpy after the optimiser), then an overlapping move
 * (memmove). */
void window_kernel_main(void* payload, size_t size, void* target_args) {
  const unsigned char* from = (const unsigned char*)payload;
  unsigned char* to = (unsigned char*)target_args;
  if (size > 256) size = 256;
  for (size_t k = 0; k < size; ++k) to[k] = from[k];
  __builtin_memmove(to + 3, to, size / 2);
}
#elif KERNEL == 3
/* A zeroing loop (memset after the optimiser) of as many bytes as the
 * payload's first word says, at most 512, then a fill. */
void window_kernel_main(void* payload, size_t size, void* target_args) {
  uint64_t n = 0;
  if (size >= 8) n = *(const uint64_t*)payload;
  if (n > 512) n = 512;
  unsigned char* to = (unsigned char*)target_args;
  for (uint64_t k = 0; k < n; ++k) to[k] = 0;
  for (uint64_t k = n; k < n + 5 && k < 512; ++k) to[k] = 0xab;
}
#elif KERNEL == 4
/* Locals of 2 MiB: more than the window shape turns into globals (and more
 * than the checked tier's data stack holds). */
void window_kernel_main(void* payload, size_t size, void* target_args) {
  volatile unsigned char big[2 << 20];
  const unsigned char* bytes = (const unsigned char*)payload;
  for (size_t k = 0; k < size; ++k) big[(k * 4099) % sizeof(big)] = bytes[k];
  *(uint64_t*)target_args = big[size % sizeof(big)];
}
#elif KERNEL == 5
/* A local array cleared at a length that is not a multiple of eight (a
 * memset of 13 bytes after the optimiser), then filled from the payload.
 * As a loop of a known count, the code generator folded the mask into the
 * count, and the verifier refused it; the shape makes it straight-line. */
void window_kernel_main(void* payload, size_t size, void* target_args) {
  volatile unsigned char buf[13];
  for (int k = 0; k < 13; ++k) buf[k] = 0;
  const unsigned char* bytes = (const unsigned char*)payload;
  for (size_t k = 0; k < size; ++k) buf[bytes[k] % 13] += bytes[k];
  uint64_t* out = (uint64_t*)target_args;
  for (int k = 0; k < 13; ++k) out[k] = buf[k];
}
#elif KERNEL == 6
/* A loop of a known count over a fixed address, kept a loop: the code
 * generator folds the window mask into the count (`incq` of the masked
 * address), which the verifier cannot check, so it refuses the object; the
 * code is compiled again for the checked tier instead of being lost. (The
 * loop runs only for payloads past 64 KiB, and would trap in either tier.) */
void window_kernel_main(void* payload, size_t size, void* target_args) {
  if (size > 65536) {
#pragma clang loop unroll(disable) vectorize(disable)
    for (int k = 8; k < 13; ++k) ((volatile unsigned char*)0x5000)[k] = 1;
  }
  *(uint64_t*)target_args = size * 7;
}
#elif KERNEL == 7
/* Copies and fills of known lengths: a long copy (a loop over a length
 * held in a global), a short overlapping move and a non-zero fill with a
 * 4-, 2- and 1-byte tail (straight-line code). */
void window_kernel_main(void* payload, size_t size, void* target_args) {
  unsigned char* out = (unsigned char*)target_args;
  const unsigned char* in = (const unsigned char*)payload;
  if (size < 400) return;
  for (int k = 0; k < 32; ++k) out[600 + k] = (unsigned char)(in[k] ^ k);
  __builtin_memmove(out + 605, out + 600, 21);
  __builtin_memcpy(out, in + 50, 300);
  __builtin_memset(out + 310, 0x5a, 15);
}
#elif KERNEL == 8
/* A hostile reader of its own frame: a caller's payload word goes into a
 * local, and every invocation reports what that local holds before it
 * writes it. The window tier makes the local a global; what one caller
 * left there must not reach the next caller. */
void window_kernel_main(void* payload, size_t size, void* target_args) {
  volatile uint64_t frame[4];
  uint64_t* out = (uint64_t*)target_args;
  out[0] = frame[1];
  if (size >= 8) frame[1] = *(const uint64_t*)payload;
}
#else
#error "KERNEL names one of the kernels"
#endif
