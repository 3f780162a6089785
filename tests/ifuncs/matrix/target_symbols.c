/* Reaches a global variable and calls a function of the *target* process, by
 * name: the target exports them (linked with -rdynamic) for injected code. */
#include <threechains/ifunc.h>

#include "matrix.h"

extern int64_t threechains_test_target_value;
extern int64_t threechains_test_target_add(int64_t);

void target_symbols_main(void *payload, size_t payload_size, void *target_args) {
  struct matrix_result *r = (struct matrix_result *)target_args;
  (void)payload;
  (void)payload_size;
  r->values[0] = threechains_test_target_value;
  threechains_test_target_value += 5;
  r->values[1] = threechains_test_target_add(7);
  r->calls++;
}
