/* The research prototype's ifunc API (Two-Chains, "ucp_ifunc"), on ThreeChains.
 *
 * A program written against the prototype's calls ports by recompiling and
 * linking ThreeChains::ucp_ifunc: the same names, arguments and flow —
 * register an ifunc library by name, create a message whose payload the
 * library's <name>_payload_get_max_size / <name>_payload_init build from
 * source arguments, send it with one call to a remote address and rkey the
 * program manages, and poll a buffer of its own to run what arrived there.
 * The UCX context, worker, endpoints, memory and rkeys stay the program's.
 *
 * Underneath, a message is a ThreeChains frame and an ifunc library is a
 * ThreeChains container (LLVM bitcode or relocatable objects, JIT-compiled or
 * linked on the target), not a shared object. Where the prototype was unsafe,
 * the rules are ours (docs/bindings.md):
 *
 *  - Libraries are containers named <name>.tcc in one directory: the one
 *    given to ucp_ifunc_set_lib_dir, else $UCX_IFUNC_LIB_DIR. A name is
 *    letters, digits, '_' and '-' only, so no name reaches another path.
 *  - A frame carries a commit mark: a 64-bit hash over every byte of it, put
 *    before it in the buffer. ucp_poll_ifunc runs a frame only when the mark
 *    matches what has landed, however the transport ordered the bytes of the
 *    put (the prototype trusted a header and a trailer byte).
 *  - Code that arrives in a frame runs only if it is the code of the target's
 *    own library of that name (registered from its directory), or is signed
 *    by a key listed in $THREECHAINS_IFUNC_TRUSTED_KEYS (public-key files,
 *    ':'-separated). Anything else is refused and reported. Imports are
 *    limited to the safe set of docs/security.md.
 *  - The first message of an ifunc to an endpoint carries its code; later
 *    ones carry only the payload (the target keeps the code by identity).
 *
 * As in the prototype, ucp_ifunc_send_nbix is non-blocking: flush the
 * endpoint before reusing the remote buffer or freeing the message. The
 * remote buffer should be 16-byte aligned (the payload then is too).
 *
 * Threads: the calls on one context (and on messages of its ifuncs) come from
 * one thread at a time, as the prototype's single-threaded worker.
 *
 * Lifetimes: a context's ifunc state lives until ucp_ifunc_context_release
 * (call it before ucp_cleanup if the program may make another context: UCX
 * can give the new one the same address) or the end of the process; call
 * it last, with no handle of that context used after it. Deregistration
 * stops new messages of an ifunc; its code stays loaded (frames of it may
 * still arrive) and existing messages can still be sent and freed, until
 * the context is released. Which endpoints already hold an ifunc's code is
 * remembered by endpoint handle: call ucp_ifunc_forget_ep before closing an
 * endpoint (or after a put to it failed), so a later endpoint at the same
 * address is sent the code again. */
#ifndef THREECHAINS_UCP_IFUNC_H
#define THREECHAINS_UCP_IFUNC_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ucp_ifunc* ucp_ifunc_h;

/* A message: the frame the put sends (as in the prototype, passed by value). */
typedef struct ucp_ifunc_msg {
  ucp_ifunc_h ifunc_h;
  void* frame;
  size_t frame_size; /* bytes the remote buffer needs for it */
} ucp_ifunc_msg_t;

/* The directory libraries are registered from (overrides $UCX_IFUNC_LIB_DIR). */
ucs_status_t ucp_ifunc_set_lib_dir(ucp_context_h context, const char* directory);

/* Loads <dir>/<ifunc_name>.tcc. Registering a name again returns the same
 * handle (each registration is undone by one deregistration). */
ucs_status_t ucp_register_ifunc(ucp_context_h context, const char* ifunc_name,
                                ucp_ifunc_h* ifunc_p);
void ucp_deregister_ifunc(ucp_context_h context, ucp_ifunc_h ifunc_h);

/* ThreeChains additions: forget everything of `context` (its handles become
 * invalid; messages still alive keep theirs until freed), and forget that
 * `ep` was sent any ifunc's code. */
void ucp_ifunc_context_release(ucp_context_h context);
void ucp_ifunc_forget_ep(ucp_context_h context, ucp_ep_h ep);

/* Builds a message: payload_get_max_size(source_args, source_args_size) bytes
 * of payload, filled by payload_init (a library without them gets a copy of
 * the source arguments). UCS_ERR_CANCELED if payload_init fails,
 * UCS_ERR_EXCEEDS_LIMIT for a payload over 4 GiB. */
ucs_status_t ucp_ifunc_msg_create(ucp_ifunc_h ifunc_h, void* source_args, size_t source_args_size,
                                  ucp_ifunc_msg_t* msg_p);
/* The message's payload, to change it between sends. */
ucs_status_t ucp_ifunc_msg_get_payload_ptr(ucp_ifunc_msg_t* msg, void** payload,
                                           size_t* payload_size);
void ucp_ifunc_msg_free(ucp_ifunc_msg_t msg);

/* Puts the message at remote_addr (a buffer of at least msg.frame_size bytes
 * that the target polls). Returns what ucp_put_nbi returned. */
ucs_status_t ucp_ifunc_send_nbix(ucp_ep_h ep, ucp_ifunc_msg_t msg, uint64_t remote_addr,
                                 ucp_rkey_h rkey);

/* Progresses `worker` once (if given), then runs the frame in `buffer` if a
 * whole one has landed, with `target_args` as its third argument, and clears
 * the buffer's commit mark. UCS_OK: one ran. UCS_ERR_NO_MESSAGE: nothing (yet).
 * UCS_ERR_CANCELED: the frame was rejected (reported on stderr) and cleared.
 * A frame whose bytes never match its mark (a put torn by a source that
 * died) reads as not yet landed until the next put overwrites it. */
ucs_status_t ucp_poll_ifunc(ucp_context_h context, void* buffer, size_t buffer_size,
                            void* target_args, ucp_worker_h worker);

#ifdef __cplusplus
}
#endif

#endif /* THREECHAINS_UCP_IFUNC_H */
