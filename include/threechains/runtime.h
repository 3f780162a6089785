/* The runtime that injected code may call on its target (X-RDMA). The symbols
 * resolve, when the ifunc is compiled or linked, to the target process's
 * ThreeChains runtime; they are valid only while the ifunc runs inside a
 * threechains::Node. No UCX handle crosses into injected code.
 *
 * Sends are queued and carried out by the Node after the ifunc returns, so an
 * ifunc never re-enters UCX progress and never blocks on credits, and a chain of
 * sends (even to its own rank) never deepens the stack. */
#ifndef THREECHAINS_RUNTIME_H
#define THREECHAINS_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* This process's rank and the number of ranks in the mesh. */
int64_t threechains_rank(void);
int64_t threechains_ranks(void);

/* The rank whose frame is running now (the previous hop), -1 if not known. */
int64_t threechains_origin(void);

/* Sends the running ifunc itself, with `payload`, to `rank` (which may be this
 * rank). Returns 0, or -1 if `rank` is out of range, no ifunc is running, or
 * the Node's send queue is full (NodeOptions::max_queued_sends and
 * max_queued_bytes): the ifunc decides what to do then (give up, or return
 * and let a later frame try again). */
int threechains_send_self(int64_t rank, const void *payload, size_t payload_size);

/* Sends the ifunc named `name` that this process holds (it ran here, or was
 * installed) to `rank`. Returns 0, or -1 if there is no such ifunc or rank,
 * or the send queue is full. */
int threechains_send_named(int64_t rank, const char *name, const void *payload, size_t payload_size);

/* An object the target process exposed under `name` (Node::expose), or NULL. */
void *threechains_lookup(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* THREECHAINS_RUNTIME_H */
