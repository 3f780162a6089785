/* The Chaser: follows pointers while the next entry is local, forwards itself
 * to the owning server when it is not, and sends the ReturnResult ifunc to the
 * client when the steps run out. */
#include <threechains/ifunc.h>
#include <threechains/runtime.h>

#include "chase.h"

void chaser_main(void* payload, size_t payload_size, void* target_args) {
  (void)target_args;
  if (payload_size != sizeof(struct chase_request)) return;
  struct chase_request r = *(const struct chase_request*)payload;
  const struct chase_shard* shard = (const struct chase_shard*)threechains_lookup("chase_shard");
  if (shard == 0) return;
  const int64_t me = threechains_rank();
  while (r.remaining > 0 && chase_owner_rank(shard, r.index) == me) {
    r.index = shard->entries[r.index - shard->base];
    r.remaining--;
  }
  if (r.remaining == 0) {
    struct chase_result done = {r.id, r.index};
    threechains_send_named(r.client, "return_result", &done, sizeof(done));
  } else {
    threechains_send_self(chase_owner_rank(shard, r.index), &r, sizeof(r));
  }
}
