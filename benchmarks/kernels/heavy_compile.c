/* An ifunc that takes LLVM long to compile: HEAVY_BLOCKS blocks of 1024
 * branches over the payload, straight-line (tests/ifuncs/heavy.c is the
 * 4096-branch one). threechains-bench-compile-isolation sends it confined
 * and measures what an honest peer's round trips do meanwhile. */
#include <threechains/ifunc.h>

#include <stdint.h>

#ifndef HEAVY_BLOCKS
#define HEAVY_BLOCKS 16
#endif

#define STEP(i)                                   \
  if (bytes[(i) % 61] > (uint8_t)(i))             \
    acc = acc * 31 + bytes[((i) * 7) % 63];       \
  else                                            \
    acc ^= acc >> ((i) % 13 + 1);
#define STEP4(i) STEP(i) STEP(i + 1) STEP(i + 2) STEP(i + 3)
#define STEP16(i) STEP4(i) STEP4(i + 4) STEP4(i + 8) STEP4(i + 12)
#define STEP64(i) STEP16(i) STEP16(i + 16) STEP16(i + 32) STEP16(i + 48)
#define STEP256(i) STEP64(i) STEP64(i + 64) STEP64(i + 128) STEP64(i + 192)
#define STEP1024(i) STEP256(i) STEP256(i + 256) STEP256(i + 512) STEP256(i + 768)
#define BLOCK(k) \
  if (HEAVY_BLOCKS > (k)) { STEP1024((k) * 1024) }

void heavy_compile_main(void* payload, size_t payload_size, void* target_args) {
  const uint8_t* bytes = (const uint8_t*)payload;
  uint64_t acc = payload_size;
  if (payload_size < 64) return;
  BLOCK(0) BLOCK(1) BLOCK(2) BLOCK(3) BLOCK(4) BLOCK(5) BLOCK(6) BLOCK(7)
  BLOCK(8) BLOCK(9) BLOCK(10) BLOCK(11) BLOCK(12) BLOCK(13) BLOCK(14) BLOCK(15)
  BLOCK(16) BLOCK(17) BLOCK(18) BLOCK(19) BLOCK(20) BLOCK(21) BLOCK(22) BLOCK(23)
  BLOCK(24) BLOCK(25) BLOCK(26) BLOCK(27) BLOCK(28) BLOCK(29) BLOCK(30) BLOCK(31)
  (void)target_args;
  *(uint64_t*)payload = acc; /* the target's counter stays the honest peer's */
}
