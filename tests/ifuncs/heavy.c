/* Honest code that takes LLVM a while: 4096 branches over the payload,
 * straight-line (about 3 s of -O2 and code generation here). The
 * compile worker's limits (ConfinementOptions::compile_time_limit,
 * compile_memory_limit) are set below what it needs in the tests that send
 * it; the target serves its other peers while it compiles. */
#include <threechains/ifunc.h>

#include <stdint.h>

#define STEP(i)                                   \
  if (bytes[(i) % 61] > (uint8_t)(i))             \
    acc = acc * 31 + bytes[((i) * 7) % 63];       \
  else                                            \
    acc ^= acc >> ((i) % 13 + 1);
#define STEP4(i) STEP(i) STEP(i + 1) STEP(i + 2) STEP(i + 3)
#define STEP16(i) STEP4(i) STEP4(i + 4) STEP4(i + 8) STEP4(i + 12)
#define STEP64(i) STEP16(i) STEP16(i + 16) STEP16(i + 32) STEP16(i + 48)
#define STEP256(i) STEP64(i) STEP64(i + 64) STEP64(i + 128) STEP64(i + 192)

void heavy_main(void* payload, size_t payload_size, void* target_args) {
  const uint8_t* bytes = (const uint8_t*)payload;
  uint64_t acc = payload_size;
  if (payload_size < 64) return;
  STEP256(0) STEP256(256) STEP256(512) STEP256(768)
  STEP256(1024) STEP256(1280) STEP256(1536) STEP256(1792)
  STEP256(2048) STEP256(2304) STEP256(2560) STEP256(2816)
  STEP256(3072) STEP256(3328) STEP256(3584) STEP256(3840)
  *(uint64_t*)target_args += acc;
}
