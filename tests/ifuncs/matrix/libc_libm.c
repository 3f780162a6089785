/* Calls into libc (snprintf, memcpy, strlen) and libm (cos), which the target
 * resolves from its own process and from the ifunc's dependency libm.so.6. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <threechains/ifunc.h>

#include "matrix.h"

void libc_libm_main(void *payload, size_t payload_size, void *target_args) {
  struct matrix_result *r = (struct matrix_result *)target_args;
  double x = 0;
  if (payload_size == sizeof(double)) memcpy(&x, payload, sizeof(x));
  r->values[0] = (int64_t)(cos(x) * 1000000.0);
  r->values[1] = snprintf(r->text, sizeof(r->text), "%d-%s-%.2f", 42, "libc", x);
  r->values[2] = (int64_t)strlen(r->text);
  r->calls++;
}
