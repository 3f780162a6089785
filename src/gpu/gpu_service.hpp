// Internal: a Receiver's GPU (ReceiverOptions::gpu). Kernels are compiled here
// (LLVM, bitcode to PTX for the GPU's sm_XX, kept in the code cache) and run
// in a worker process (threechains-gpu-worker; worker_protocol.hpp says why):
// a kernel that faults or overruns its deadline costs that process, which is
// started again, with the device regions exposed again and each kernel
// loaded again before its next run. Device memory the application exposes is
// its own (this process's context) and survives; the worker opens it through
// CUDA IPC.
#pragma once

#include "gpu/cuda_driver.hpp"
#include "gpu/ptx_compiler.hpp"
#include "gpu/worker_protocol.hpp"

#include <threechains/error.hpp>
#include <threechains/frame.hpp>
#include <threechains/gpu.hpp>

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace threechains::gpu {

class Service {
 public:
  // A kernel as this process knows it: enough to load it into a new worker.
  struct Kernel {
    CodeId id = 0;
    std::string name;
    std::string ptx;
    uint64_t generation = 0;  // of the worker it is loaded in (0: none)
  };
  struct Loaded {
    const Kernel* kernel = nullptr;
    std::chrono::nanoseconds compile{0};      // LLVM (0 if the PTX came from the cache)
    std::chrono::nanoseconds driver_load{0};  // the driver's PTX JIT, in the worker
    bool from_cache = false;
  };

  // Starts a worker on options.device. Throws Error(errc::gpu_failed)
  // saying what is missing (the driver, a GPU, the worker program).
  Service(const GpuOptions& options, std::size_t max_payload, std::string cache_directory);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  [[nodiscard]] const GpuInfo& info() const noexcept { return info_; }

  // Compiles the image for this GPU and loads it in the worker. Throws Error
  // (compile_ptx's; gpu_failed with the driver's log). The kernel lives
  // until unload(id) or the end of the service.
  Loaded load(CodeId id, const ParsedImage& image);
  void unload(CodeId id) noexcept;
  // Runs `kernel` on `payload` in the worker and waits for it, at most
  // GpuOptions::kernel_timeout. With `copy_back` what the kernel wrote into
  // the payload comes back into `payload`. nullopt if it ran; else why not
  // (after a fault or a timeout the worker has been started again).
  std::optional<Error> run(const Kernel& kernel, std::byte* payload, std::size_t size,
                           bool copy_back) noexcept;

  void expose(const std::string& name, CUdeviceptr address, std::size_t bytes);
  [[nodiscard]] CUdeviceptr allocate(const std::string& name, std::size_t bytes);
  void copy_to_device(CUdeviceptr to, const void* from, std::size_t bytes);
  void copy_from_device(void* to, CUdeviceptr from, std::size_t bytes);

 private:
  struct Region {
    std::string name;
    CUipcMemHandle handle{};
    std::size_t offset = 0;
    std::size_t bytes = 0;
    CUdeviceptr owned = 0;  // allocate()'d here: freed with the service
  };
  enum class Outcome { done, timed_out, died };

  void start_worker();          // spawns one and waits until it is up; throws
  void stop_worker() noexcept;  // kills the one there is, if any
  void restart_worker(std::string& why) noexcept;
  Outcome post_and_wait(worker::Command command, std::chrono::nanoseconds limit) noexcept;
  void send_region(const Region& region);                                      // throws
  void load_in_worker(Kernel& kernel, std::chrono::nanoseconds* driver_time);  // throws
  void memory_context();  // this process's primary context, for memory calls
  void check(CUresult result, const char* what) const;
  [[nodiscard]] std::string cache_path(CodeId id) const;

  const Driver& driver_;
  GpuOptions options_;
  std::size_t max_payload_;
  std::string cache_directory_;
  std::string libdevice_;
  std::string worker_program_;
  GpuInfo info_;
  int mapping_fd_ = -1;
  std::size_t mapping_bytes_ = 0;
  void* mapping_ = nullptr;
  worker::Control* control_ = nullptr;
  std::byte* payload_ = nullptr;
  char* text_ = nullptr;
  pid_t pid_ = -1;
  int lifeline_ = -1;         // the write end of the worker's lifeline pipe
  uint64_t temporaries_ = 0;  // PTX cache files written
  uint32_t sequence_ = 0;
  uint64_t generation_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;  // retained for memory calls, on first use
  std::vector<Region> regions_;
  std::unordered_map<CodeId, std::unique_ptr<Kernel>> kernels_;
};

}  // namespace threechains::gpu
