/* A mesh bootstrapped from the launcher that started it, through the C API:
 *
 *   mpirun -np N c_mesh LAUNCHER TRANSPORT RELAY_CONTAINER KEY PUBKEY
 *
 * LAUNCHER is pmix, mpi or auto. Every rank gets its rank, the mesh size and
 * every other rank's address from the launcher; rank 0 starts a relay chain
 * (tests/ifuncs/xrdma/relay.c) that goes round the ranks 10 times; each rank
 * checks it ran exactly its share of the hops, each from the previous rank. */
#include "c_support.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Mirrors struct relay_state and struct relay_payload in relay.c. */
struct relay_state {
  int64_t seen;
  int64_t finished;
  int64_t bad_origin;
};
struct relay_payload {
  int64_t remaining;
  int64_t hops;
};

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: c_mesh LAUNCHER TRANSPORT RELAY_CONTAINER KEY PUBKEY\n");
    return 2;
  }
  threechains_context* context = NULL;
  threechains_worker* worker = NULL;
  threechains_keypair* key = NULL;
  threechains_ifunc* relay = NULL;
  threechains_node* node = NULL;
  CHECK(threechains_context_create(argv[2], &context));
  CHECK(threechains_worker_create(context, &worker));
  CHECK(threechains_keypair_load(argv[4], &key));
  threechains_trust* trust = trust_of_key_file(argv[5]);
  CHECK(threechains_ifunc_load(argv[3], &relay));

  threechains_receiver_options receiver;
  threechains_receiver_options_init(&receiver);
  receiver.trust = trust;
  receiver.identity = key;
  threechains_channel_options channel;
  threechains_channel_options_init(&channel);
  channel.identity = key;
  threechains_node_options options;
  threechains_node_options_init(&options);
  options.receiver = &receiver;
  options.channel = &channel;
  /* Exposed before connecting: another rank's hop may run here meanwhile. */
  struct relay_state state = {0, 0, 0};
  const char* names[] = {"relay_state"};
  void* objects[] = {&state};
  options.exposed_names = names;
  options.exposed_objects = objects;
  options.exposed_count = 1;
  /* C_MESH_FAIL_RANK=r: rank r fails inside the bootstrap (a NULL name to
   * expose), leaving the others waiting; the job must end, not hang. */
  const char* fail_rank = getenv("C_MESH_FAIL_RANK");
  const char* my_rank = getenv("OMPI_COMM_WORLD_RANK");
  if (fail_rank != NULL && my_rank != NULL && strcmp(fail_rank, my_rank) == 0) names[0] = NULL;
  CHECK(threechains_node_bootstrap(worker, argv[1], &options, &node));

  const int64_t rank = threechains_node_rank(node);
  const int64_t ranks = threechains_node_ranks(node);

  /* Hop k (k = 0..forwards) runs on rank (1 + k) % ranks. */
  const int64_t forwards = 10 * ranks;
  int64_t share = 0;
  for (int64_t k = 0; k <= forwards; ++k) share += (1 + k) % ranks == rank;

  int ok = 1;
  if (rank == 0) {
    struct relay_payload start = {forwards, 0};
    CHECK(threechains_node_send(node, 1 % ranks, relay, &start, sizeof(start)));
    const double deadline = seconds() + 60.0;
    while (state.finished == 0 && seconds() < deadline) CHECK(threechains_node_poll(node, NULL));
    ok = state.finished == forwards;
    printf("c_mesh: %" PRId64 " ranks through %s, the relay made %" PRId64
           " forwards (expected %" PRId64 ")\n",
           ranks, argv[1], state.finished, forwards);
  }
  /* Everyone serves until the chain is over everywhere, then leaves. */
  CHECK(threechains_node_barrier(node));
  ok = ok && state.seen == share && state.bad_origin == 0;
  printf("c_mesh rank %" PRId64 ": ran %" PRId64 " hops (expected %" PRId64 "), %" PRId64
         " from an unexpected origin: %s\n",
         rank, state.seen, share, state.bad_origin, ok ? "ok" : "WRONG");
  fflush(stdout);
  CHECK(threechains_node_close(node));
  CHECK(threechains_node_barrier(node));
  threechains_node_destroy(node);
  threechains_ifunc_destroy(relay);
  threechains_trust_destroy(trust);
  threechains_keypair_destroy(key);
  threechains_worker_destroy(worker);
  threechains_context_destroy(context);
  return ok ? 0 : 1;
}
