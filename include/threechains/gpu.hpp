// GPU ifuncs: code shipped at run time that runs on the target's GPU
// (docs/gpu.md). A container built with threechains_add_ifunc(... GPU nvptx64)
// carries NVPTX bitcode beside its CPU images; a Receiver given a GpuOptions
// compiles it with LLVM for its GPU's own sm_XX, loads the PTX through the
// CUDA driver, which the library opens at run time (libcuda.so.1: nothing of
// CUDA is needed to build ThreeChains or to run it without a GPU), and
// launches <name>_main as a kernel on each frame's payload. Kernels run in a
// worker process of the Receiver's (threechains-gpu-worker): CUDA cannot
// recover a process whose context faulted, and stops a kernel past its
// deadline only with its context, so a fault or a timeout costs that process,
// which the Receiver starts again; device memory the application exposed is
// its own and survives (the worker maps it through CUDA IPC, and sees no
// other memory of the application's).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace threechains {

struct GpuOptions {
  int device = 0;  // CUDA device ordinal
  // A kernel still running after this long is reported (errc::gpu_failed)
  // and its worker process stopped (and started again), which stops it.
  std::chrono::milliseconds kernel_timeout{10'000};
  // Payloads up to this size are read by the kernel from pinned host memory
  // mapped into the GPU (no DMA to set up); larger ones are copied into
  // device memory first. threechains-bench-gpu measures both: on an H200,
  // mapped was faster up to 256 KiB, the copy from 1 MiB
  // (docs/performance.md, "GPU ifuncs").
  std::size_t mapped_payload_max = std::size_t{256} << 10;
  // LLVM's middle-end level for the NVPTX image: 0 none, 1..3 O1..O3.
  int optimisation_level = 3;
  // libdevice (CUDA's math library as bitcode) for code that calls __nv_*
  // functions: found under CUDA_HOME, /usr/local/cuda, Debian's
  // nvidia-cuda-toolkit, unless named here.
  std::string libdevice;
};

// What a Receiver's GPU is, once it opened it (Receiver::gpu_info).
struct GpuInfo {
  bool available = false;
  std::string why_not;     // when not available: what was missing
  std::string name;        // e.g. "NVIDIA H100 80GB HBM3"
  std::string arch;        // e.g. "sm_90": what NVPTX code is compiled for
  int driver_version = 0;  // e.g. 13000
  int multiprocessors = 0;
  // The payload area shared with the GPU worker is pinned and mapped into
  // the GPU (kernels read payloads there; copies are DMA). False where the
  // driver would not pin it: payloads are then staged through the driver.
  bool payload_pinned = false;
  uint64_t kernels_run = 0;
  uint64_t context_rebuilds = 0;  // worker processes started again after a fault or timeout
};

}  // namespace threechains
