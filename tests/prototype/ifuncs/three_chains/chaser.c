/* The chase itself: follows links while they are local, then sends itself on
 * (X-RDMA) or, at depth 0, sends the result ifunc to the client. */
#include "pointer_chase.h"

size_t chaser_payload_bound(void* source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int chaser_payload_init(void* source_args, size_t source_args_size, void* payload,
                        size_t* payload_size) {
  if (source_args_size != sizeof(pc_src_args_t)) return -1;
  *(pc_src_args_t*)payload = *(const pc_src_args_t*)source_args;
  *payload_size = sizeof(pc_src_args_t);
  return 0;
}

void chaser_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload_size;
  /* Read once: the buffer is free for the next frame while this one runs. */
  const pc_src_args_t chase = *(const pc_src_args_t*)payload;
  pc_tgt_args_t* t = (pc_tgt_args_t*)target_args;
  const uint64_t table = (uint64_t)t->servers * t->shard_size;
  uint64_t addr = chase.addr % table;
  uint64_t depth = chase.depth;
  while (depth > 0 && addr / t->shard_size == (uint64_t)t->shard_id) {
    addr = t->data[addr % t->shard_size] % table;
    --depth;
  }
  if (depth == 0) {
    void* result = NULL;
    ucp_ifunc_msg_get_payload_ptr(&t->result_msg, &result, NULL);
    *(uint64_t*)result = addr;
    const uint64_t to = chase.dest;
    ucp_ifunc_send_nbix(t->ep[to], t->result_msg, t->remote_heap[to], t->rkey[to]);
    t->flush(t->worker, t->ep[to]);
    return;
  }
  const int to = (int)(addr / t->shard_size) + 1; /* process 0 is the client */
  void* next = NULL;
  ucp_ifunc_msg_get_payload_ptr(&t->chaser_msg, &next, NULL);
  pc_src_args_t* onward = (pc_src_args_t*)next;
  onward->depth = depth;
  onward->addr = addr;
  onward->dest = chase.dest;
  ucp_ifunc_send_nbix(t->ep[to], t->chaser_msg, t->remote_heap[to], t->rkey[to]);
  t->flush(t->worker, t->ep[to]);
  t->forwarded += 1;
}
