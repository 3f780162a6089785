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

/* GPU ifuncs (threechains_add_ifunc(... GPU nvptx64), docs/gpu.md). The same
 * source is compiled for the GPU with __NVPTX__ defined; there `foo_main` is a
 * kernel:
 *
 *   THREECHAINS_GPU_KERNEL void foo_main(void *payload, size_t payload_size,
 *                                        const threechains_device_regions *regions);
 *
 * `payload` is the frame's payload in memory the GPU reads (device memory, or
 * pinned host memory for small payloads); what the kernel writes there is
 * what a host-side `foo_complete(payload, payload_size, target_args)` of the
 * CPU image sees after the kernel completed (to send a result onward with
 * <threechains/runtime.h>). `regions` lists the device memory the target
 * exposed (Receiver::expose_device), in the order it exposed it. The grid
 * covers the whole GPU (THREECHAINS_GPU_THREADS threads per block, enough
 * blocks to fill every multiprocessor): loop with threechains_gpu_index()
 * and threechains_gpu_stride(). */
typedef struct threechains_device_region {
  void *base;
  uint64_t bytes;
} threechains_device_region;

enum { THREECHAINS_MAX_DEVICE_REGIONS = 16, THREECHAINS_GPU_THREADS = 256 };

typedef struct threechains_device_regions {
  uint64_t count;
  threechains_device_region region[THREECHAINS_MAX_DEVICE_REGIONS];
} threechains_device_regions;

#if defined(__NVPTX__)
/* The entry attribute: the function is a kernel the target launches. */
#define THREECHAINS_GPU_KERNEL __attribute__((nvptx_kernel))
/* Memory shared by the threads of one block. */
#define THREECHAINS_GPU_SHARED __attribute__((address_space(3)))

static inline unsigned threechains_gpu_thread(void) { return __nvvm_read_ptx_sreg_tid_x(); }
static inline unsigned threechains_gpu_block(void) { return __nvvm_read_ptx_sreg_ctaid_x(); }
static inline unsigned threechains_gpu_block_size(void) { return __nvvm_read_ptx_sreg_ntid_x(); }
static inline unsigned threechains_gpu_blocks(void) { return __nvvm_read_ptx_sreg_nctaid_x(); }
/* This thread's index in the whole grid, and the grid's size. */
static inline size_t threechains_gpu_index(void) {
  return (size_t)threechains_gpu_block() * threechains_gpu_block_size() + threechains_gpu_thread();
}
static inline size_t threechains_gpu_stride(void) {
  return (size_t)threechains_gpu_blocks() * threechains_gpu_block_size();
}
/* Waits for every thread of the block (CUDA's __syncthreads). */
static inline void threechains_gpu_barrier(void) { __nvvm_barrier_sync(0); }
#endif

#ifdef __cplusplus
}
#endif

#endif /* THREECHAINS_IFUNC_H */
