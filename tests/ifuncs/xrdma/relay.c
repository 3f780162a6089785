/* A relay: each hop counts itself in the rank's exposed "relay_state" and
 * forwards itself to the next rank, until the hops run out; the last hop tells
 * rank 0 how many there were. Exercises send_self, send_named and origin. */
#include <threechains/ifunc.h>
#include <threechains/runtime.h>

struct relay_payload {
  int64_t remaining; /* forwards still to do; -1: "the chain ended" (at rank 0) */
  int64_t hops;      /* forwards done so far */
};

struct relay_state {
  int64_t seen;       /* hops that ran on this rank */
  int64_t finished;   /* rank 0: total forwards, once the chain ended */
  int64_t bad_origin; /* hops whose origin was not the previous rank */
};

void relay_main(void* payload, size_t payload_size, void* target_args) {
  (void)target_args;
  if (payload_size != sizeof(struct relay_payload)) return;
  struct relay_payload p = *(const struct relay_payload*)payload;
  struct relay_state* state = (struct relay_state*)threechains_lookup("relay_state");
  if (state == 0) return;
  const int64_t rank = threechains_rank();
  const int64_t ranks = threechains_ranks();
  if (p.remaining < 0) {
    state->finished = p.hops;
    return;
  }
  state->seen++;
  if (p.hops > 0 && threechains_origin() != (rank + ranks - 1) % ranks) state->bad_origin++;
  struct relay_payload next = {p.remaining - 1, p.hops + 1};
  if (p.remaining == 0) {
    struct relay_payload done = {-1, p.hops};
    threechains_send_named(0, "relay", &done, sizeof(done));
  } else {
    threechains_send_self((rank + 1) % ranks, &next, sizeof(next));
  }
}
