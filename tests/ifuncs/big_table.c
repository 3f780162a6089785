/* big_table: a counter whose container is large, compiling in milliseconds.
 * It adds table[payload word % entries] to the target's counter. The table is
 * 65536 words of a multiplicative hash, which zstd cannot shrink, so the
 * container is over 256 KiB: what a target handles apart from small code
 * (JitCache prepares large confined containers beside its serving thread). */
#include <threechains/ifunc.h>

#define R(i) ((uint32_t)((uint32_t)(i) * 2654435761u) ^ ((uint32_t)((uint32_t)(i) * 40503u) >> 7))
#define A(i) R((i) + 0), R((i) + 1), R((i) + 2), R((i) + 3), R((i) + 4), R((i) + 5), R((i) + 6), R((i) + 7), R((i) + 8), R((i) + 9), R((i) + 10), R((i) + 11), R((i) + 12), R((i) + 13), R((i) + 14), R((i) + 15)
#define B(i) A((i) + 0), A((i) + 16), A((i) + 32), A((i) + 48), A((i) + 64), A((i) + 80), A((i) + 96), A((i) + 112), A((i) + 128), A((i) + 144), A((i) + 160), A((i) + 176), A((i) + 192), A((i) + 208), A((i) + 224), A((i) + 240)
#define C(i) B((i) + 0), B((i) + 256), B((i) + 512), B((i) + 768), B((i) + 1024), B((i) + 1280), B((i) + 1536), B((i) + 1792), B((i) + 2048), B((i) + 2304), B((i) + 2560), B((i) + 2816), B((i) + 3072), B((i) + 3328), B((i) + 3584), B((i) + 3840)

static const uint32_t table[] = {C(0), C(4096), C(8192), C(12288), C(16384), C(20480), C(24576), C(28672), C(32768), C(36864), C(40960), C(45056), C(49152), C(53248), C(57344), C(61440)};

void big_table_main(void* payload, size_t payload_size, void* target_args) {
  uint64_t word = 0;
  if (payload_size >= sizeof(uint64_t)) word = *(const uint64_t*)payload;
  *(volatile uint64_t*)target_args += table[word % (sizeof(table) / sizeof(table[0]))];
}
