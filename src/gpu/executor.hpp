// Internal: a GPU as one process drives it. It owns the device's primary
// context (retained), one stream, the payload buffers and the loaded
// kernels, and runs a kernel on a payload: stream-ordered, no allocation and
// no context-wide synchronisation per call (one wait, on the stream, for
// completion). A Receiver's runs in its GPU worker process (worker_main.cpp,
// gpu_service.hpp); threechains-bench-gpu drives one directly.
#pragma once

#include "gpu/cuda_driver.hpp"
#include "gpu/ptx_compiler.hpp"

#include <threechains/error.hpp>
#include <threechains/frame.hpp>
#include <threechains/gpu.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace threechains::gpu {

// A kernel loaded on the GPU.
struct Kernel {
  std::string name;  // the ifunc's
  Ptx ptx;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  unsigned grid = 0;  // blocks: enough to fill every multiprocessor
};

// What loading a kernel cost.
struct KernelLoad {
  const Kernel* kernel = nullptr;
  std::chrono::nanoseconds driver_load{0};  // cuModuleLoadDataEx: the driver's PTX JIT
};

class Executor {
 public:
  // Opens options.device; payloads up to `max_payload` bytes. Throws
  // Error(errc::gpu_failed) saying what is missing.
  Executor(const GpuOptions& options, std::size_t max_payload);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  [[nodiscard]] const GpuInfo& info() const noexcept { return info_; }

  // Loads PTX as kernel `id` (the driver JITs it for this GPU). Throws
  // Error(gpu_failed) with the driver's log. The kernel lives until
  // unload(id) or the executor's end.
  KernelLoad load_ptx(CodeId id, std::string name, Ptx ptx);
  void unload(CodeId id) noexcept;
  [[nodiscard]] const Kernel* find(CodeId id) const noexcept {
    const auto it = kernels_.find(id);
    return it == kernels_.end() ? nullptr : it->second.get();
  }

  // Runs `kernel` on `payload` and waits for it. With `copy_back`, what the
  // kernel wrote into the payload is copied back into `payload`. nullopt if
  // it ran; else what happened. After a fault (poisoned()) this process can
  // run nothing more on the GPU.
  std::optional<Error> run(const Kernel& kernel, std::byte* payload, std::size_t size,
                           bool copy_back) noexcept;
  [[nodiscard]] bool poisoned() const noexcept { return poisoned_; }

  // Pins `bytes` at `host` (the worker's shared payload area) and maps it
  // into the GPU: a payload run() finds there is read by the kernel in place
  // (mapped) or copied by DMA (not through the driver's pageable staging).
  // False if the driver would not pin it: payloads are then copied as from
  // anywhere else.
  bool adopt_payload_buffer(std::byte* host, std::size_t bytes) noexcept;

  // Device memory kernels see in their region table, in this order.
  void expose(const std::string& name, CUdeviceptr base, std::size_t bytes);
  // Memory of another process (cuIpcGetMemHandle), `offset` into that allocation.
  void expose_ipc(const CUipcMemHandle& handle, std::size_t offset, std::size_t bytes);

  [[nodiscard]] const Driver& driver() const noexcept { return driver_; }
  [[nodiscard]] CUstream stream() const noexcept { return stream_; }

 private:
  struct Region {
    std::string name;
    CUdeviceptr base = 0;
    std::size_t bytes = 0;
    CUdeviceptr opened = 0;  // cuIpcOpenMemHandle'd here (base is within it)
  };
  void open_context();  // retains the primary context, makes the stream and buffers
  void release_context() noexcept;
  void publish_regions();
  void load_module(Kernel& kernel, std::chrono::nanoseconds* driver_time);
  void check(CUresult result, const char* what) const;

  const Driver& driver_;
  GpuOptions options_;
  std::size_t max_payload_;
  GpuInfo info_;
  bool poisoned_ = false;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  void* pinned_ = nullptr;          // mapped into the GPU: small payloads
  CUdeviceptr pinned_device_ = 0;   // its address there
  CUdeviceptr device_payload_ = 0;  // large payloads
  CUdeviceptr region_table_ = 0;    // threechains_device_regions
  std::byte* adopted_ = nullptr;    // adopt_payload_buffer's, pinned and mapped
  std::size_t adopted_bytes_ = 0;
  CUdeviceptr adopted_device_ = 0;
  std::vector<Region> regions_;
  std::unordered_map<CodeId, std::unique_ptr<Kernel>> kernels_;
};

}  // namespace threechains::gpu
