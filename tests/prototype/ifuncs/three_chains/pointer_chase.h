/* The pointer chase's arguments (Three-Chains' shape): a table sharded over
 * the servers; a chase follows `depth` links from `addr`, forwarding itself to
 * the server that holds the next link, and the last server sends the result
 * to the client. Shared by the program and its ifuncs. */
#ifndef PROTOTYPE_POINTER_CHASE_H
#define PROTOTYPE_POINTER_CHASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

typedef struct pc_src_args {
  uint64_t depth;
  uint64_t addr;
  uint64_t dest; /* the process to send the result to */
} pc_src_args_t;

typedef struct pc_tgt_args {
  int shard_id;   /* 0-based: this server holds [shard_id * shard_size, +shard_size) */
  uint64_t* data; /* this server's shard */
  ucp_ep_h* ep;   /* by process: 0 is the client, 1.. the servers */
  ucp_worker_h worker;
  ucp_ifunc_msg_t chaser_msg;
  ucp_ifunc_msg_t result_msg;
  ucp_rkey_h* rkey;      /* by process */
  uint64_t* remote_heap; /* by process: where its receive buffer is */
  ucs_status_t (*flush)(ucp_worker_h worker, ucp_ep_h ep);
  int servers;
  uint64_t shard_size;
  uint64_t forwarded; /* chases this server sent onward */
  bool run;           /* cleared by the stop ifunc */
} pc_tgt_args_t;

#endif
