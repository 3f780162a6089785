/* The C ABI of an ifunc library. Any LLVM language can produce one.
 *
 * For an ifunc named `foo` the library defines, on the target:
 *
 *   void foo_main(void *payload, size_t payload_size, void *target_args);
 *
 * and may define, for C sources that build their payload on the source side:
 *
 *   size_t foo_payload_get_max_size(void *source_args, size_t source_args_size);
 *   int    foo_payload_init(void *source_args, size_t source_args_size,
 *                           void *payload, size_t *payload_size);
 *
 * (The prototype-compatible API, <threechains/ucp_ifunc.h>, also takes
 * Three-Chains' name <name>_payload_bound for the first, and Two-Chains'
 * payload_init that takes the payload first: docs/bindings.md.)
 *
 * `payload` points into the target's ring slot (16-byte aligned); the ifunc may
 * read and modify it until it returns. `target_args` is what the target process
 * gave its Receiver. The code is compiled (bitcode) or linked (binary) on the
 * target; external symbols resolve against the target process and the libraries
 * the ifunc lists as dependencies. */
#ifndef THREECHAINS_IFUNC_H
#define THREECHAINS_IFUNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*threechains_ifunc_main_fn)(void* payload, size_t payload_size, void* target_args);
typedef size_t (*threechains_payload_get_max_size_fn)(void* source_args, size_t source_args_size);
typedef int (*threechains_payload_init_fn)(void* source_args, size_t source_args_size,
                                           void* payload, size_t* payload_size);

#ifdef __cplusplus
}
#endif

#endif /* THREECHAINS_IFUNC_H */
