// The nvcc baseline of gpu_saxpy.c: the same kernel in CUDA C++, built on the
// GPU machine with nvcc -O3 -arch=sm_XX -cubin (scripts/gpu-check.sh) and
// loaded by threechains-bench-gpu --cubin beside the ifunc's PTX.
#include <stddef.h>
#include <stdint.h>

struct region {
  void* base;
  uint64_t bytes;
};
struct regions {
  uint64_t count;
  region region[16];
};

extern "C" __global__ void gpu_saxpy_main(void* payload, size_t payload_size, const regions* r) {
  if (payload_size < sizeof(float) || r->count < 2) return;
  const float a = *static_cast<const float*>(payload);
  const float* x = static_cast<const float*>(r->region[0].base);
  float* y = static_cast<float*>(r->region[1].base);
  const size_t n = r->region[1].bytes / sizeof(float);
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = a * x[i] + y[i];
}
