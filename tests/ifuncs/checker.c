/* The stress test's checker: verifies frame `next_index`'s size and every byte. */
#include <threechains/ifunc.h>

#include <string.h>

#include "../support/pattern.h"

void checker_main(void* payload, size_t payload_size, void* target_args) {
  struct pattern_state* s = (struct pattern_state*)target_args;
  const uint64_t index = s->next_index++;
  const unsigned char* bytes = (const unsigned char*)payload;
  int ok = payload_size == pattern_size(s->seed, index, s->max_size);
  size_t at = 0;
  for (; ok && at + 8 <= payload_size; at += 8) {
    uint64_t word;
    memcpy(&word, bytes + at, 8);
    ok = word == pattern_word(s->seed, index, at / 8);
  }
  if (ok && at < payload_size) {
    const uint64_t last = pattern_word(s->seed, index, at / 8);
    for (size_t k = 0; ok && at + k < payload_size; ++k)
      ok = bytes[at + k] == (unsigned char)(last >> (8 * k));
  }
  if (ok) {
    s->good++;
  } else {
    if (s->bad == 0) s->first_bad = index;
    s->bad++;
  }
}
