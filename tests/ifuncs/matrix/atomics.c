/* C11 atomics, including a 16-byte compare-exchange: for a generic x86_64 or
 * aarch64 the compiler emits a libatomic call, so libatomic.so.1 is a dependency. */
#include <stdatomic.h>
#include <threechains/ifunc.h>

#include "matrix.h"

struct pair {
  int64_t a, b;
};

static _Atomic int64_t hits;
static _Atomic struct pair wide;

void atomics_main(void *payload, size_t payload_size, void *target_args) {
  struct matrix_result *r = (struct matrix_result *)target_args;
  (void)payload;
  (void)payload_size;
  r->values[0] = atomic_fetch_add(&hits, 1) + 1;
  struct pair expected = atomic_load(&wide);
  struct pair desired = {expected.a + 1, expected.b + 2};
  r->values[1] = atomic_compare_exchange_strong(&wide, &expected, desired);
  struct pair now = atomic_load(&wide);
  r->values[2] = now.a;
  r->values[3] = now.b;
  r->calls++;
}
