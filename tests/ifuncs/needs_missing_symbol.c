/* Calls a function no target process defines: loading must fail with an error
 * naming the symbol, and the Receiver must keep serving. */
#include <threechains/ifunc.h>

extern void threechains_test_no_such_function(uint64_t*);

void missing_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload;
  (void)payload_size;
  threechains_test_no_such_function((uint64_t*)target_args);
}
