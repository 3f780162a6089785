/* Honest code that takes LLVM a while: HEAVY_BLOCKS blocks (4 unless
 * built with -DHEAVY_BLOCKS=N) of 1024 branches over the payload,
 * straight-line (4 blocks: seconds of -O2 and code generation; the target
 * of the previous main compiled them in 4.6 s, 2026-11-27). The
 * tests that send it set the compile worker's limits
 * (ConfinementOptions::compile_time_limit, compile_memory_limit) below what
 * it needs; threechains-bench-compile-isolation lets 8 blocks compile while
 * it measures an honest peer. It leaves target_args alone (the targets'
 * counters stay the honest peers'). */
#include <threechains/ifunc.h>

#include <stdint.h>

#ifndef HEAVY_BLOCKS
#define HEAVY_BLOCKS 4
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

void heavy_main(void* payload, size_t payload_size, void* target_args) {
  const uint8_t* bytes = (const uint8_t*)payload;
  uint64_t acc = payload_size;
  (void)target_args;
  if (payload_size < 64) return;
  BLOCK(0) BLOCK(1) BLOCK(2) BLOCK(3) BLOCK(4) BLOCK(5) BLOCK(6) BLOCK(7)
  *(uint64_t*)payload = acc;
}
