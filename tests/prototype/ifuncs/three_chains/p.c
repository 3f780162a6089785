/* Ifunc-initiated ping-pong (Three-Chains' p): on arrival it sends the
 * message its target_args hold back to the other side, from inside the ifunc,
 * through the prototype's own ucp_ifunc_send_nbix. */
#include "p.h"

size_t p_payload_bound(void* source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int p_payload_init(void* source_args, size_t source_args_size, void* payload,
                   size_t* payload_size) {
  (void)source_args;
  (void)source_args_size;
  (void)payload;
  (void)payload_size;
  return 0;
}

void p_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload;
  (void)payload_size;
  p_args_t* args = (p_args_t*)target_args;
  args->counter += 1;
  if (args->to_send == 0) return;
  args->to_send -= 1;
  ucp_ifunc_send_nbix(args->ep, args->msg, args->remote_heap, args->rkey);
  args->flush(args->worker, args->ep);
}
