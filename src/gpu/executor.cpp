// The GPU executor: kernels shipped as NVPTX bitcode, run on frames' payloads.
#include "gpu/executor.hpp"

#include <threechains/ifunc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace threechains::gpu {
namespace {

void cpu_relax() noexcept {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Errors after which the context can do nothing more (CUDA's "sticky"
// errors): it must be destroyed and made again.
bool poisons_context(CUresult result) {
  switch (result) {
    case 700:  // CUDA_ERROR_ILLEGAL_ADDRESS
    case 702:  // CUDA_ERROR_LAUNCH_TIMEOUT
    case 710:  // CUDA_ERROR_ASSERT
    case 714:  // CUDA_ERROR_HARDWARE_STACK_ERROR
    case 715:  // CUDA_ERROR_ILLEGAL_INSTRUCTION
    case 716:  // CUDA_ERROR_MISALIGNED_ADDRESS
    case 717:  // CUDA_ERROR_INVALID_ADDRESS_SPACE
    case 718:  // CUDA_ERROR_INVALID_PC
    case 719:  // CUDA_ERROR_LAUNCH_FAILED
      return true;
    default:
      return false;
  }
}

}  // namespace

Executor::Executor(const GpuOptions& options, std::size_t max_payload)
    : driver_(Driver::get()),
      options_(options),
      max_payload_(std::max<std::size_t>(max_payload, 16)) {
  int count = 0;
  check(driver_.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (options.device < 0 || options.device >= count) {
    throw Error(errc::gpu_failed, "no CUDA device " + std::to_string(options.device) +
                                      " (this host has " + std::to_string(count) + ")");
  }
  check(driver_.cuDeviceGet(&device_, options.device), "cuDeviceGet");
  check(driver_.cuDriverGetVersion(&info_.driver_version), "cuDriverGetVersion");
  char name[256] = {};
  check(driver_.cuDeviceGetName(name, sizeof(name) - 1, device_), "cuDeviceGetName");
  info_.name = name;
  int major = 0;
  int minor = 0;
  check(driver_.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_),
        "cuDeviceGetAttribute");
  check(driver_.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_),
        "cuDeviceGetAttribute");
  info_.arch = "sm_" + std::to_string(major * 10 + minor);
  check(driver_.cuDeviceGetAttribute(&info_.multiprocessors,
                                     CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_),
        "cuDeviceGetAttribute");
  int can_map = 0;
  check(driver_.cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device_),
        "cuDeviceGetAttribute");
  if (can_map == 0) options_.mapped_payload_max = 0;  // every payload through device memory
  open_context();
  info_.available = true;
}

Executor::~Executor() {
  if (!poisoned_) {  // a poisoned context frees nothing: it goes with the process
    for (auto& [id, kernel] : kernels_) (void)driver_.cuModuleUnload(kernel->module);
  }
  release_context();
}

void Executor::check(CUresult result, const char* what) const {
  if (result != CUDA_SUCCESS) [[unlikely]]
    throw Error(errc::gpu_failed, std::string(what) + ": " + driver_.describe(result));
}

void Executor::open_context() {
  check(driver_.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  try {
    check(driver_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    check(driver_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(driver_.cuMemHostAlloc(&pinned_, max_payload_,
                                 CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
          "cuMemHostAlloc (the payload's pinned buffer)");
    check(driver_.cuMemHostGetDevicePointer(&pinned_device_, pinned_, 0),
          "cuMemHostGetDevicePointer");
    check(driver_.cuMemAlloc(&device_payload_, max_payload_), "cuMemAlloc (the payload's buffer)");
    check(driver_.cuMemAlloc(&region_table_, sizeof(threechains_device_regions)),
          "cuMemAlloc (the region table)");
    publish_regions();
  } catch (...) {
    release_context();
    throw;
  }
}

void Executor::release_context() noexcept {
  if (context_ == nullptr) return;
  if (poisoned_) {
    (void)driver_.cuDevicePrimaryCtxRelease(device_);
    context_ = nullptr;
    return;
  }
  (void)driver_.cuCtxSetCurrent(context_);
  for (Region& region : regions_) {
    if (region.opened != 0) (void)driver_.cuIpcCloseMemHandle(region.opened);
  }
  if (adopted_ != nullptr) (void)driver_.cuMemHostUnregister(adopted_);
  adopted_ = nullptr;
  if (region_table_ != 0) (void)driver_.cuMemFree(region_table_);
  if (device_payload_ != 0) (void)driver_.cuMemFree(device_payload_);
  if (pinned_ != nullptr) (void)driver_.cuMemFreeHost(pinned_);
  if (stream_ != nullptr) (void)driver_.cuStreamDestroy(stream_);
  region_table_ = device_payload_ = pinned_device_ = 0;
  pinned_ = nullptr;
  stream_ = nullptr;
  (void)driver_.cuDevicePrimaryCtxRelease(device_);
  context_ = nullptr;
}

void Executor::publish_regions() {
  threechains_device_regions table{};
  table.count = regions_.size();
  for (std::size_t i = 0; i < regions_.size(); ++i) {
    table.region[i].base = reinterpret_cast<void*>(regions_[i].base);
    table.region[i].bytes = regions_[i].bytes;
  }
  check(driver_.cuMemcpyHtoD(region_table_, &table, sizeof(table)), "cuMemcpyHtoD (region table)");
}

void Executor::expose(const std::string& name, CUdeviceptr base, std::size_t bytes) {
  if (regions_.size() >= THREECHAINS_MAX_DEVICE_REGIONS) {
    throw Error(errc::limit_exceeded, "expose_device('" + name + "'): at most " +
                                          std::to_string(THREECHAINS_MAX_DEVICE_REGIONS) +
                                          " device regions");
  }
  check(driver_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  regions_.push_back({name, base, bytes});
  publish_regions();
}

bool Executor::adopt_payload_buffer(std::byte* host, std::size_t bytes) noexcept {
  if (driver_.cuCtxSetCurrent(context_) != CUDA_SUCCESS ||
      driver_.cuMemHostRegister(
          host, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS)
    return false;
  CUdeviceptr device = 0;
  if (driver_.cuMemHostGetDevicePointer(&device, host, 0) != CUDA_SUCCESS) {
    (void)driver_.cuMemHostUnregister(host);
    return false;
  }
  adopted_ = host;
  adopted_bytes_ = bytes;
  adopted_device_ = device;
  return true;
}

void Executor::expose_ipc(const CUipcMemHandle& handle, std::size_t offset, std::size_t bytes) {
  check(driver_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  CUdeviceptr opened = 0;
  check(driver_.cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
        "cuIpcOpenMemHandle (a device region of the Receiver's process)");
  try {
    expose("region " + std::to_string(regions_.size()), opened + offset, bytes);
  } catch (...) {
    (void)driver_.cuIpcCloseMemHandle(opened);
    throw;
  }
  regions_.back().opened = opened;
}

void Executor::load_module(Kernel& kernel, std::chrono::nanoseconds* driver_time) {
  check(driver_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  char error_log[8192] = {};
  char info_log[1024] = {};
  int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                   CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log, reinterpret_cast<void*>(sizeof(error_log) - 1), info_log,
                    reinterpret_cast<void*>(sizeof(info_log) - 1)};
  const auto started = std::chrono::steady_clock::now();
  CUmodule module = nullptr;
  const CUresult loaded =
      driver_.cuModuleLoadDataEx(&module, kernel.ptx.text.c_str(), 4, options, values);
  if (driver_time != nullptr) *driver_time = std::chrono::steady_clock::now() - started;
  if (loaded != CUDA_SUCCESS) {
    std::string why = "GPU ifunc '" + kernel.name + "': the CUDA driver could not load its PTX (" +
                      info_.arch + "): " + driver_.describe(loaded);
    if (loaded == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
      why += "; this driver (" + std::to_string(info_.driver_version) +
             ") is older than the PTX ISA LLVM wrote: update the NVIDIA driver";
    }
    if (error_log[0] != '\0') why += "; the driver's log: " + std::string(error_log);
    throw Error(errc::gpu_failed, why);
  }
  CUfunction function = nullptr;
  if (const CUresult r = driver_.cuModuleGetFunction(&function, module, kernel.ptx.entry.c_str());
      r != CUDA_SUCCESS) {
    (void)driver_.cuModuleUnload(module);
    throw Error(errc::gpu_failed, "GPU ifunc '" + kernel.name + "': its module has no kernel '" +
                                      kernel.ptx.entry + "': " + driver_.describe(r));
  }
  int per_multiprocessor = 0;
  if (driver_.cuOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_multiprocessor, function, THREECHAINS_GPU_THREADS, 0) != CUDA_SUCCESS ||
      per_multiprocessor < 1)
    per_multiprocessor = 1;
  kernel.module = module;
  kernel.function = function;
  kernel.grid = static_cast<unsigned>(per_multiprocessor * std::max(info_.multiprocessors, 1));
}

KernelLoad Executor::load_ptx(CodeId id, std::string name, Ptx ptx) {
  auto kernel = std::make_unique<Kernel>();
  kernel->name = std::move(name);
  kernel->ptx = std::move(ptx);
  KernelLoad result;
  load_module(*kernel, &result.driver_load);
  unload(id);
  result.kernel = kernel.get();
  kernels_.emplace(id, std::move(kernel));
  return result;
}

void Executor::unload(CodeId id) noexcept {
  const auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  if (it->second->module != nullptr && !poisoned_) {
    (void)driver_.cuCtxSetCurrent(context_);
    (void)driver_.cuModuleUnload(it->second->module);
  }
  kernels_.erase(it);
}

std::optional<Error> Executor::run(const Kernel& kernel, std::byte* payload, std::size_t size,
                                   bool copy_back) noexcept {
  const char* step = "cuCtxSetCurrent";
  try {
    if (poisoned_) throw Error(errc::gpu_failed, "the GPU context faulted before");
    if (size > max_payload_) {
      throw Error(errc::limit_exceeded, "a payload of " + std::to_string(size) +
                                            " bytes, over the GPU's payload buffer of " +
                                            std::to_string(max_payload_));
    }
    CUresult result = driver_.cuCtxSetCurrent(context_);
    const bool mapped = size <= options_.mapped_payload_max;
    // A payload in the adopted (pinned, mapped) buffer is used where it is.
    const bool in_place = payload == adopted_ && size <= adopted_bytes_;
    CUdeviceptr where = !mapped ? device_payload_ : in_place ? adopted_device_ : pinned_device_;
    if (result == CUDA_SUCCESS && size != 0) {
      if (mapped) {
        if (!in_place) std::memcpy(pinned_, payload, size);
      } else {
        step = "cuMemcpyHtoDAsync (the payload)";
        result = driver_.cuMemcpyHtoDAsync(device_payload_, payload, size, stream_);
      }
    }
    uint64_t size_argument = size;
    void* arguments[] = {&where, &size_argument, &region_table_};
    if (result == CUDA_SUCCESS) {
      step = "cuLaunchKernel";
      result = driver_.cuLaunchKernel(kernel.function, kernel.grid, 1, 1, THREECHAINS_GPU_THREADS,
                                      1, 1, 0, stream_, arguments, nullptr);
    }
    if (result == CUDA_SUCCESS && copy_back && !mapped && size != 0) {
      step = "cuMemcpyDtoHAsync (the payload)";
      result = driver_.cuMemcpyDtoHAsync(payload, device_payload_, size, stream_);
    }
    if (result == CUDA_SUCCESS) {
      // Completion: the stream, polled (a blocking wait costs a wake-up). A
      // kernel that never ends is the Receiver's to stop (it ends this
      // process: GpuOptions::kernel_timeout).
      step = "the kernel";
      unsigned polls = 0;
      while ((result = driver_.cuStreamQuery(stream_)) == CUDA_ERROR_NOT_READY) {
        if (++polls < (1u << 16)) {
          cpu_relax();
        } else {
          std::this_thread::yield();  // a long kernel: let others run
        }
      }
    }
    if (result != CUDA_SUCCESS) [[unlikely]] {
      poisoned_ = poisons_context(result);
      return Error(errc::gpu_failed,
                   "GPU ifunc '" + kernel.name + "': " + step + ": " + driver_.describe(result));
    }
    if (copy_back && mapped && !in_place && size != 0) std::memcpy(payload, pinned_, size);
    ++info_.kernels_run;
    return std::nullopt;
  } catch (const Error& error) {
    return error;
  } catch (const std::exception& error) {
    return Error(errc::gpu_failed, "GPU ifunc '" + kernel.name + "': " + error.what());
  }
}

}  // namespace threechains::gpu
