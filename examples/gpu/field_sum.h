/* The payload of examples/gpu/field_sum.c: a request, then its answer. */
#ifndef FIELD_SUM_H
#define FIELD_SUM_H

#include <stdint.h>

enum { FIELD_SUM_REQUEST = 1, FIELD_SUM_ANSWER = 2 };

struct field_sum {
  uint32_t phase;
  uint32_t sequence; /* which request this answers */
  int64_t reply_to;  /* the rank that asked */
  double sum;        /* the kernel adds the field into it */
  uint64_t elements;
};

/* The target's second device region: where blocks add their sums (device
 * memory: atomics there are the GPU's own, unlike the payload's, which may be
 * host memory mapped into the GPU). Zero between calls. */
struct field_sum_scratch {
  double sum;
  uint32_t blocks_done;
  uint32_t pad;
};

#endif
