/* The research prototypes' ifunc API (Two-Chains and Three-Chains,
 * "ucp_ifunc"), on ThreeChains.
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
 *    given to ucp_ifunc_set_lib_dir, else $UCX_IFUNC_LIB_DIR, else
 *    threechains/ifuncs beside this library (<libdir>/threechains/ifuncs).
 *    A name is letters, digits, '_' and '-' only, so no name reaches
 *    another path. A peer can make the target load and run any library of
 *    that directory (as the prototypes could): keep there only what may run
 *    for anyone who can put into your buffers.
 *  - A frame carries a commit mark: a 64-bit hash over every byte of it, put
 *    before it in the buffer. ucp_poll_ifunc runs a frame only when the mark
 *    matches what has landed, however the transport ordered the bytes of the
 *    put (the prototype trusted a header and a trailer byte).
 *  - Code that arrives in a frame runs only if it is the code of the target's
 *    own library of that name (registered from its directory or from memory
 *    by the program), or is signed by a key listed in
 *    $THREECHAINS_IFUNC_TRUSTED_KEYS (public-key files, ':'-separated).
 *    Anything else is refused and reported. Imports: below.
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
 * address is sent the code again.
 *
 * Both prototypes' conventions (docs/bindings.md), told apart by how they are
 * called, so that their programs build unchanged with
 * `-include threechains/ucp_ifunc.h` (pkg-config threechains-ucp-ifunc; the
 * prototypes declared these calls in <ucp/api/ucp.h>):
 *
 *  - Two-Chains: ucp_register_ifunc(context, "name", &ifunc) and the
 *    4-argument ucp_poll_ifunc(context, buffer, size, target_args); libraries
 *    define <name>_payload_get_max_size and
 *    <name>_payload_init(payload, payload_size, source_args, source_args_size).
 *  - Three-Chains: ucp_register_ifunc(context, param, &ifunc) with a
 *    ucp_ifunc_reg_param_t, ucp_register_ifunc_im, the 5-argument ucp_poll_ifunc; libraries
 *    define <name>_payload_bound and
 *    <name>_payload_init(source_args, source_args_size, payload, &payload_size)
 *    (the order <threechains/ifunc.h> also takes).
 *
 * Which order a library's payload_init takes is read off its type in the
 * library's bitcode; a library with no bitcode (OBJECT or PRELINKED only)
 * takes the order of the program's first registration of it: Three-Chains'
 * unless the program registers it by name and is compiled with
 * -DTHREECHAINS_UCP_IFUNC_TWO_CHAINS. In C, the two ucp_register_ifunc forms
 * need C11 (_Generic), and a compound literal passed to it goes in
 * parentheses, ((ucp_ifunc_reg_param_t){...}), as to any macro; C++
 * overloads them.
 *
 * The 4-argument poll progresses no worker of its own: it progresses the
 * context's worker if the context has exactly one (as the prototypes'
 * programs do), which this library learns by standing in front of
 * ucp_worker_create when it is linked before libucp (pkg-config and CMake
 * link it so). Over transports whose puts need the target's progress (tcp),
 * a program with several workers must pass its worker (the 5-argument form).
 *
 * The imports injected code may use are docs/security.md's safe set, plus
 * ucp_ifunc_msg_get_payload_ptr and ucp_ifunc_send_nbix (so an ifunc can
 * send one onward, as the prototype's pointer chase does), plus the symbols
 * named in $THREECHAINS_IFUNC_ALLOW_IMPORTS (':'-separated, e.g. printf).
 * A library that imports anything else is refused with UCS_ERR_REJECTED,
 * naming the symbol. The `pure` and `llvm_bc` registration fields are
 * accepted and not used: the container says what its code is, the policy
 * what it may import. */
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

/* Three-Chains: what to register. `pure` and `llvm_bc` are accepted, unused. */
typedef struct ucp_ifunc_reg_param {
  char* name;
  int pure;
  int llvm_bc;
} ucp_ifunc_reg_param_t;

/* Three-Chains: one bitcode module in memory and the triple it is for. */
typedef struct ucp_llvm_bc {
  char* triple;
  void* bc;
  uint32_t size;
} ucp_llvm_bc_t;

/* The directory libraries are registered from. Without it, $UCX_IFUNC_LIB_DIR;
 * without that, <libdir>/threechains/ifuncs of the installation. */
ucs_status_t ucp_ifunc_set_lib_dir(ucp_context_h context, const char* directory);

/* Loads <dir>/<ifunc_name>.tcc (Two-Chains' form). Registering a name again
 * returns the same handle (each registration is undone by one
 * deregistration). UCS_ERR_IO_ERROR: no such library (or unreadable);
 * UCS_ERR_REJECTED: its code imports what the policy refuses;
 * UCS_ERR_NO_ELEM: a shared library it needs is missing;
 * UCS_ERR_UNSUPPORTED: no code for this host; UCS_ERR_INVALID_PARAM: a bad
 * name or a malformed library. The reason is written to stderr. */
ucs_status_t ucp_register_ifunc(ucp_context_h context, const char* ifunc_name,
                                ucp_ifunc_h* ifunc_p);
/* The same, by Three-Chains' parameters. */
ucs_status_t ucp_register_ifunc_param(ucp_context_h context, ucp_ifunc_reg_param_t param,
                                      ucp_ifunc_h* ifunc_p);
/* The same for a Two-Chains program whose libraries carry no bitcode (what
 * -DTHREECHAINS_UCP_IFUNC_TWO_CHAINS makes ucp_register_ifunc call). */
ucs_status_t ucp_register_ifunc_two_chains(ucp_context_h context, const char* ifunc_name,
                                           ucp_ifunc_h* ifunc_p);
/* Three-Chains: registers a library from bitcode in memory, one module per
 * triple, and the shared libraries it needs (the safe set's: libm, libgcc_s,
 * libatomic). The program's own code, so trusted as its own library is; a
 * peer runs it only by sending the same container (the same bitcode packed
 * by the same ThreeChains). UCS_ERR_ALREADY_EXISTS if the name is held by
 * other code in this context. */
ucs_status_t ucp_register_ifunc_im(ucp_context_h context, ucp_ifunc_reg_param_t param,
                                   ucp_llvm_bc_t* bcs, int n_bcs, char** deps, int n_deps,
                                   ucp_ifunc_h* ifunc_p);
void ucp_deregister_ifunc(ucp_context_h context, ucp_ifunc_h ifunc_h);

/* ThreeChains additions: forget everything of `context` (its handles become
 * invalid; messages still alive keep theirs until freed), and forget that
 * `ep` was sent any ifunc's code. */
void ucp_ifunc_context_release(ucp_context_h context);
void ucp_ifunc_forget_ep(ucp_context_h context, ucp_ep_h ep);

/* Builds a message: <name>_payload_get_max_size (or _payload_bound) of the
 * source arguments bytes of payload, filled by <name>_payload_init (a library
 * without them gets a copy of the source arguments; then source_args may be
 * NULL only if source_args_size is 0). UCS_ERR_CANCELED if payload_init
 * fails, UCS_ERR_EXCEEDS_LIMIT for a payload over 4 GiB. On any error
 * *msg_p is left empty, and ucp_ifunc_msg_free of it does nothing. */
ucs_status_t ucp_ifunc_msg_create(ucp_ifunc_h ifunc_h, void* source_args, size_t source_args_size,
                                  ucp_ifunc_msg_t* msg_p);
/* The message's payload, to change it between sends. */
ucs_status_t ucp_ifunc_msg_get_payload_ptr(ucp_ifunc_msg_t* msg, void** payload,
                                           size_t* payload_size);
void ucp_ifunc_msg_free(ucp_ifunc_msg_t msg);

/* Puts the message at remote_addr (a buffer of at least msg.frame_size bytes
 * that the target polls). Returns what ucp_put_nbi returned. The first
 * message of an ifunc to an endpoint carries its code: the buffer must hold
 * that frame (`threechains-inspect` prints a container's size; a pre-linked
 * single-triple library is smallest), later ones need only the payload and
 * 48 bytes. */
ucs_status_t ucp_ifunc_send_nbix(ucp_ep_h ep, ucp_ifunc_msg_t msg, uint64_t remote_addr,
                                 ucp_rkey_h rkey);

/* Progresses `worker` once (if given), then runs the frame in `buffer` if a
 * whole one has landed, with `target_args` as its third argument. The
 * buffer's commit mark is cleared before the ifunc runs (as the prototype
 * did), so a frame put there meanwhile (a reply it caused) is kept for the
 * next poll; its payload stays in the buffer while it runs, so an ifunc that
 * causes such a put reads its payload first. UCS_OK: one ran. UCS_ERR_NO_MESSAGE: nothing (yet).
 * UCS_ERR_CANCELED: the frame was rejected (reported on stderr) and cleared.
 * A frame whose bytes never match its mark (a put torn by a source that
 * died) reads as not yet landed until the next put overwrites it. */
ucs_status_t ucp_poll_ifunc(ucp_context_h context, void* buffer, size_t buffer_size,
                            void* target_args, ucp_worker_h worker);
/* Two-Chains' form: progresses the context's worker if it has exactly one. */
ucs_status_t ucp_poll_ifunc_context(ucp_context_h context, void* buffer, size_t buffer_size,
                                    void* target_args);

#ifdef __cplusplus
}

/* C++: both prototypes' forms by overloading. */
inline ucs_status_t ucp_register_ifunc(ucp_context_h context, ucp_ifunc_reg_param_t param,
                                       ucp_ifunc_h* ifunc_p) {
  return ucp_register_ifunc_param(context, param, ifunc_p);
}
inline ucs_status_t ucp_poll_ifunc(ucp_context_h context, void* buffer, size_t buffer_size,
                                   void* target_args) {
  return ucp_poll_ifunc_context(context, buffer, buffer_size, target_args);
}
#ifdef THREECHAINS_UCP_IFUNC_TWO_CHAINS
/* By name, Two-Chains' way (a library without bitcode takes its order). */
inline ucs_status_t threechains_ucp_register_two_chains(ucp_context_h context, const char* name,
                                                       ucp_ifunc_h* ifunc_p) {
  return ucp_register_ifunc_two_chains(context, name, ifunc_p);
}
inline ucs_status_t threechains_ucp_register_two_chains(ucp_context_h context,
                                                       ucp_ifunc_reg_param_t param,
                                                       ucp_ifunc_h* ifunc_p) {
  return ucp_register_ifunc_param(context, param, ifunc_p);
}
#define ucp_register_ifunc threechains_ucp_register_two_chains
#endif

#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
/* C11: the call's shape picks the form. A function-like macro expands only
 * where the name is followed by '(', and never inside its own expansion. */
#ifdef THREECHAINS_UCP_IFUNC_TWO_CHAINS
#define THREECHAINS_UCP_REGISTER_BY_NAME ucp_register_ifunc_two_chains
#else
#define THREECHAINS_UCP_REGISTER_BY_NAME ucp_register_ifunc
#endif
#define ucp_register_ifunc(context, name_or_param, ifunc_p)                            \
  _Generic((name_or_param),                                                            \
      ucp_ifunc_reg_param_t: ucp_register_ifunc_param,                                 \
      default: THREECHAINS_UCP_REGISTER_BY_NAME)(context, name_or_param, ifunc_p)
#define THREECHAINS_UCP_POLL_PICK(a, b, c, d, e, form, ...) form
#define ucp_poll_ifunc(...)                                                            \
  THREECHAINS_UCP_POLL_PICK(__VA_ARGS__, ucp_poll_ifunc, ucp_poll_ifunc_context,       \
                            ucp_poll_ifunc_takes_4_or_5_arguments,                     \
                            ucp_poll_ifunc_takes_4_or_5_arguments,                     \
                            ucp_poll_ifunc_takes_4_or_5_arguments)(__VA_ARGS__)

#elif defined(THREECHAINS_UCP_IFUNC_TWO_CHAINS)
#error "THREECHAINS_UCP_IFUNC_TWO_CHAINS needs C11 or C++ (the forms are picked by _Generic)"
#endif

#endif /* THREECHAINS_UCP_IFUNC_H */
