/* Runs one aarch64 kernel's machine code from a confinement-style window,
 * under qemu-aarch64, so that qemu's trace (-singlestep -d nochain,exec)
 * counts the instructions it executes (benchmarks/aarch64_count.sh).
 *
 *   count_harness <text.bin> <entry offset> saxpy|chase <n>
 *
 * The window: 4 GiB at kWindowBase (4 GiB aligned), between 2 GiB guards,
 * as src/confine/window.hpp reserves it; the kernel's image, linked to run
 * at kCode (the script links it there), is mapped at kCode, the data at
 * window + 1 MiB, and x21 holds the window's base during the call, as the
 * aarch64 window shape expects. Native code ignores x21 and runs the same
 * way. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GIB (UINT64_C(1) << 30)
#define kWindowBase UINT64_C(0x4000000000)
#define kCode (kWindowBase + 0x10000)

static uint64_t call(const void* entry, uint8_t* base, uint64_t a0, uint64_t a1, uint64_t a2,
                     float f0) {
  register uint64_t x0 __asm__("x0") = a0;
  register uint64_t x1 __asm__("x1") = a1;
  register uint64_t x2 __asm__("x2") = a2;
  register uint8_t* x21 __asm__("x21") = base;
  register float s0 __asm__("s0") = f0;
  __asm__ volatile("blr %[entry]"
                   : "+r"(x0), "+r"(x1), "+r"(x2), "+w"(s0)
                   : [entry] "r"(entry), "r"(x21)
                   : "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
                     "x15", "x16", "x17", "x18", "x30", "v1", "v2", "v3", "v4", "v5", "v6", "v7",
                     "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26",
                     "v27", "v28", "v29", "v30", "v31", "memory", "cc");
  return x0;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s image.bin entry-offset saxpy|chase n\n", argv[0]);
    return 2;
  }
  FILE* file = fopen(argv[1], "rb");
  if (file == NULL) return perror(argv[1]), 1;
  static uint8_t text[1 << 16];
  const size_t text_bytes = fread(text, 1, sizeof text, file);
  fclose(file);
  const uint64_t entry_offset = strtoull(argv[2], NULL, 0);
  const uint64_t n = strtoull(argv[4], NULL, 0);

  uint8_t* reservation =
      mmap((void*)(kWindowBase - 2 * GIB), 8 * GIB, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (reservation == MAP_FAILED) return perror("reserve"), 1;
  uint8_t* base = (uint8_t*)kWindowBase;
  uint8_t* code = (uint8_t*)kCode;
  const size_t data_bytes = (size_t)(n + 16) * 8 * 2;
  uint8_t* data = base + (UINT64_C(1) << 20);
  if (mprotect(code, 1 << 16, PROT_READ | PROT_WRITE) != 0 ||
      mprotect(data, data_bytes, PROT_READ | PROT_WRITE) != 0)
    return perror("map"), 1;
  memcpy(code, text, text_bytes);
  __builtin___clear_cache((char*)code, (char*)code + text_bytes);
  if (mprotect(code, 1 << 16, PROT_READ | PROT_EXEC) != 0) return perror("protect"), 1;
  const void* entry = code + entry_offset;
  /* Where the kernel runs: the script counts the trace's lines in it. */
  printf("code %016llx %016llx\n", (unsigned long long)(uintptr_t)code,
         (unsigned long long)(uintptr_t)(code + text_bytes));

  if (strcmp(argv[3], "saxpy") == 0) {
    float* x = (float*)data;
    float* y = x + n + 16;
    for (uint64_t i = 0; i < n; ++i) x[i] = y[i] = (float)i;
    call(entry, base, (uint64_t)x, (uint64_t)y, n, 2.0f);
    printf("%g\n", (double)y[n - 1]); /* 3 (n - 1) */
  } else {
    uint64_t* next = (uint64_t*)data;
    for (uint64_t i = 0; i < n; ++i) next[i] = (i * 7 + 1) % n;
    printf("%llu\n", (unsigned long long)call(entry, base, (uint64_t)next, 0, n, 0.0f));
  }
  return 0;
}
