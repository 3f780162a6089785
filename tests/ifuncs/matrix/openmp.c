/* An OpenMP parallel-for reduction: outlined work-sharing code calling into
 * libomp, which travels as a dependency of the ifunc. */
#include <threechains/ifunc.h>

#include "matrix.h"

void openmp_main(void *payload, size_t payload_size, void *target_args) {
  struct matrix_result *r = (struct matrix_result *)target_args;
  int64_t n = 100000;
  if (payload_size == sizeof(int64_t)) n = *(const int64_t *)payload;
  int64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) num_threads(2)
  for (int64_t i = 1; i <= n; ++i) sum += i;
  r->values[0] = sum;
  r->calls++;
}
