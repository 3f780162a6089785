/* The distributed pointer chase: shared by the ifuncs (C) and the host program. */
#ifndef THREECHAINS_CHASE_H
#define THREECHAINS_CHASE_H

#include <stdint.h>

/* What a server exposes as "chase_shard". Server s (rank s + 1) holds entries
 * [s * per_server, (s + 1) * per_server) of the table. */
struct chase_shard {
  const uint64_t* entries;
  uint64_t base;
  uint64_t per_server;
  int64_t servers;
};

/* Travels with the chaser. */
struct chase_request {
  uint64_t index;     /* where the chase stands */
  uint64_t remaining; /* steps still to take */
  int64_t client;     /* rank to send the result to */
  uint64_t id;        /* the client's number for this chase */
};

struct chase_result {
  uint64_t id;
  uint64_t index; /* the entry reached */
};

/* What the client exposes as "chase_results": the last result that came back. */
struct chase_results {
  uint64_t received;
  struct chase_result last;
};

static inline int64_t chase_owner_rank(const struct chase_shard* s, uint64_t index) {
  return 1 + (int64_t)(index / s->per_server);
}

#endif
