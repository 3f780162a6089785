/* Sends itself to its own rank until the depth runs out: a recursion that must
 * not grow the stack (each send is queued and run from the Node's loop). */
#include <threechains/ifunc.h>
#include <threechains/runtime.h>

void recurse_main(void* payload, size_t payload_size, void* target_args) {
  if (payload_size != sizeof(int64_t)) return;
  const int64_t remaining = *(const int64_t*)payload;
  int64_t* calls = (int64_t*)target_args;
  ++*calls;
  if (remaining > 0) {
    const int64_t next = remaining - 1;
    threechains_send_self(threechains_rank(), &next, sizeof(next));
  }
}
