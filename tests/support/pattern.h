/* The stress test's payload pattern, shared by the source (C++) and the checker
 * ifunc (C, compiled to bitcode): frame i has a size and every byte derived from
 * i, so the target can check each payload without being told what to expect. */
#ifndef THREECHAINS_TEST_PATTERN_H
#define THREECHAINS_TEST_PATTERN_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t pattern_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Payload size of frame `index`: 1 .. max_size bytes. */
static inline size_t pattern_size(uint64_t seed, uint64_t index, size_t max_size) {
  return 1 + (size_t)(pattern_mix(seed ^ (index * 0x100000001b3ULL)) % max_size);
}

/* The 8-byte word `word` of frame `index`'s payload (the tail uses its low bytes). */
static inline uint64_t pattern_word(uint64_t seed, uint64_t index, uint64_t word) {
  return pattern_mix((seed + index) * 0x9e3779b97f4a7c15ULL ^ word);
}

struct pattern_state {
  uint64_t seed;
  uint64_t max_size;
  uint64_t next_index; /* the frame the checker expects next */
  uint64_t good;       /* frames whose size and every byte matched */
  uint64_t bad;        /* frames with a wrong size or a wrong byte */
  uint64_t first_bad;  /* index of the first bad frame, if any */
};

#endif
