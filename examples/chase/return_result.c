/* ReturnResult: runs on the client and records the chase's final entry. An
 * empty payload does nothing (the client uses one to hand servers the code). */
#include <threechains/ifunc.h>
#include <threechains/runtime.h>

#include "chase.h"

void return_result_main(void* payload, size_t payload_size, void* target_args) {
  (void)target_args;
  if (payload_size != sizeof(struct chase_result)) return;
  struct chase_results* results = (struct chase_results*)threechains_lookup("chase_results");
  if (results == 0) return;
  results->last = *(const struct chase_result*)payload;
  results->received++;
}
