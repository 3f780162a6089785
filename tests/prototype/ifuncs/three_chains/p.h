/* p's target arguments: what it needs to send itself back. Shared by the
 * program and the ifunc. */
#ifndef PROTOTYPE_P_H
#define PROTOTYPE_P_H

#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

typedef struct p_args {
  size_t counter; /* p ran this many times here */
  ucp_ep_h ep;
  ucp_ifunc_msg_t msg;
  uint64_t remote_heap;
  ucp_rkey_h rkey;
  ucs_status_t (*flush)(ucp_worker_h worker, ucp_ep_h ep);
  ucp_worker_h worker;
  size_t to_send; /* answers still to send from inside p */
} p_args_t;

#endif
