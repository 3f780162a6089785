/* A thread-local variable: works, or fails to load with a clear error. */
#include <threechains/ifunc.h>

#include "matrix.h"

static _Thread_local int64_t per_thread = 100;

void thread_local_main(void *payload, size_t payload_size, void *target_args) {
  struct matrix_result *r = (struct matrix_result *)target_args;
  (void)payload;
  (void)payload_size;
  r->values[0] = ++per_thread;
  r->calls++;
}
