// Internal: a Receiver's GPU. It owns the device's primary context (retained),
// one stream, the payload buffers and the loaded kernels, and runs a kernel
// on a frame's payload: stream-ordered, no allocation and no context-wide
// synchronisation per call (one wait, on the stream, for completion).
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

// A kernel loaded on the GPU, kept with its PTX: a context rebuilt after a
// fault loads it again before its next run.
struct Kernel {
  std::string name;  // the ifunc's
  Ptx ptx;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  unsigned grid = 0;        // blocks: enough to fill every multiprocessor
  uint64_t generation = 0;  // of the context it was loaded into
};

// What loading a GPU image cost.
struct KernelLoad {
  const Kernel* kernel = nullptr;
  std::chrono::nanoseconds compile{0};      // LLVM: bitcode to PTX (0 if from the PTX cache)
  std::chrono::nanoseconds driver_load{0};  // cuModuleLoadDataEx: the driver's PTX JIT
  bool from_cache = false;
};

class Executor {
 public:
  // Opens options.device; payloads up to `max_payload` bytes. PTX compiled
  // here is kept in `cache_directory` (if not empty; private to this user).
  // Throws Error(errc::gpu_failed) saying what is missing.
  Executor(const GpuOptions& options, std::size_t max_payload, std::string cache_directory);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  [[nodiscard]] const GpuInfo& info() const noexcept { return info_; }

  // Compiles `image` for this GPU and loads it as `id`. Throws Error
  // (compile_ptx's, and gpu_failed with the driver's JIT log). The kernel
  // lives until unload(id) or the executor's end.
  KernelLoad load(CodeId id, const ParsedImage& image);
  // Loads PTX that did not come from a container (benchmarks' baselines).
  KernelLoad load_ptx(CodeId id, std::string name, Ptx ptx);
  void unload(CodeId id) noexcept;

  // Runs `kernel` on `payload` and waits for it. With `copy_back`, what the
  // kernel wrote into the payload is copied back into `payload`. nullopt if
  // it ran; else what happened (a kernel fault or timeout rebuilt the
  // context first: the executor serves on).
  std::optional<Error> run(const Kernel& kernel, std::byte* payload, std::size_t size,
                           bool copy_back) noexcept;

  // Device memory kernels see in their region table, in this order.
  void expose(const std::string& name, CUdeviceptr base, std::size_t bytes);
  // Allocates `bytes` of device memory, owned by the executor, and exposes it.
  [[nodiscard]] CUdeviceptr allocate(const std::string& name, std::size_t bytes);
  void copy_to_device(CUdeviceptr to, const void* from, std::size_t bytes);
  void copy_from_device(void* to, CUdeviceptr from, std::size_t bytes);

  [[nodiscard]] const Driver& driver() const noexcept { return driver_; }
  [[nodiscard]] CUstream stream() const noexcept { return stream_; }

 private:
  struct Region {
    std::string name;
    CUdeviceptr base = 0;
    std::size_t bytes = 0;
    bool owned = false;
  };
  void open_context();       // retains the primary context, makes the stream and buffers
  void release_context() noexcept;
  void rebuild_context() noexcept;  // after a sticky error: the context is unusable
  void publish_regions();
  void load_module(Kernel& kernel, std::chrono::nanoseconds* driver_time);
  void check(CUresult result, const char* what) const;
  [[nodiscard]] std::string cache_path(CodeId id) const;

  const Driver& driver_;
  GpuOptions options_;
  std::size_t max_payload_;
  std::string cache_directory_;
  std::string libdevice_;
  GpuInfo info_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  void* pinned_ = nullptr;          // mapped into the GPU: small payloads
  CUdeviceptr pinned_device_ = 0;   // its address there
  CUdeviceptr device_payload_ = 0;  // large payloads
  CUdeviceptr region_table_ = 0;    // threechains_device_regions
  uint64_t generation_ = 1;
  std::vector<Region> regions_;
  std::unordered_map<CodeId, std::unique_ptr<Kernel>> kernels_;
};

}  // namespace threechains::gpu
