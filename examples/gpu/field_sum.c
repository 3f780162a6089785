/* field_sum: one source file, three parts (docs/gpu.md). On a target with a
 * GPU the kernel sums the field the target exposed in device memory (its
 * first device region, floats; the second is scratch) into the payload; then field_sum_complete, on that target's CPU, sends the payload
 * back to the rank that asked (X-RDMA). There, field_sum_main (CPU) records
 * the answer in the object that rank exposed as "field_sum_answer". */
#include <threechains/ifunc.h>

#include "field_sum.h"

#if defined(__NVPTX__)

THREECHAINS_GPU_KERNEL void field_sum_main(void *payload, size_t payload_size,
                                           const threechains_device_regions *regions) {
  if (payload_size != sizeof(struct field_sum) || regions->count < 2) return;
  struct field_sum *request = (struct field_sum *)payload;
  if (request->phase != FIELD_SUM_REQUEST) return; /* an answer, back on a rank with a GPU */
  const float *field = (const float *)regions->region[0].base;
  const size_t n = regions->region[0].bytes / sizeof(float);
  struct field_sum_scratch *scratch = (struct field_sum_scratch *)regions->region[1].base;
  /* Each thread sums its stride, the block adds its threads' sums in shared
   * memory, one atomic per block adds the block's into the scratch, and the
   * last block to finish moves the total into the payload (CUDA's
   * threadFenceReduction). */
  double mine = 0.0;
  for (size_t i = threechains_gpu_index(); i < n; i += threechains_gpu_stride()) mine += field[i];
  static THREECHAINS_GPU_SHARED double partial[THREECHAINS_GPU_THREADS];
  const unsigned t = threechains_gpu_thread();
  partial[t] = mine;
  threechains_gpu_barrier();
  for (unsigned half = THREECHAINS_GPU_THREADS / 2; half > 0; half /= 2) {
    if (t < half) partial[t] += partial[t + half];
    threechains_gpu_barrier();
  }
  if (t != 0) return;
  __atomic_fetch_add(&scratch->sum, partial[0], __ATOMIC_RELAXED);
  __nvvm_membar_gl(); /* the add is seen before the count that says it is done */
  const uint32_t done = __atomic_fetch_add(&scratch->blocks_done, 1u, __ATOMIC_ACQ_REL);
  if (done != threechains_gpu_blocks() - 1) return;
  __nvvm_membar_gl();
  request->sum = *(volatile double *)&scratch->sum;
  request->elements = n;
  scratch->sum = 0.0;
  scratch->blocks_done = 0;
}

#else

#include <threechains/runtime.h>

/* On the CPU of the rank that asked: the answer arrives. */
void field_sum_main(void *payload, size_t payload_size, void *target_args) {
  (void)target_args;
  if (payload_size != sizeof(struct field_sum)) return;
  const struct field_sum *answer = (const struct field_sum *)payload;
  if (answer->phase != FIELD_SUM_ANSWER) return; /* a request, on a rank without a GPU */
  struct field_sum *slot = (struct field_sum *)threechains_lookup("field_sum_answer");
  if (slot != 0) *slot = *answer;
}

/* On the target's CPU, after the kernel: the answer goes back. (An answer
 * that reached a rank with a GPU is recorded there, as field_sum_main does.) */
void field_sum_complete(void *payload, size_t payload_size, void *target_args) {
  if (payload_size != sizeof(struct field_sum)) return;
  struct field_sum *answer = (struct field_sum *)payload;
  if (answer->phase != FIELD_SUM_REQUEST) {
    field_sum_main(payload, payload_size, target_args);
    return;
  }
  answer->phase = FIELD_SUM_ANSWER;
  (void)threechains_send_self(answer->reply_to, answer, sizeof(*answer));
}

#endif
