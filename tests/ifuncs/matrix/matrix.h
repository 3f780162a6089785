/* What every matrix ifunc writes its findings into: the target passes a
 * pointer to one of these as target_args. */
#ifndef THREECHAINS_TEST_MATRIX_H
#define THREECHAINS_TEST_MATRIX_H

#include <stdint.h>

struct matrix_result {
  int64_t values[8];
  char text[64];
  int64_t calls;
};

#endif
