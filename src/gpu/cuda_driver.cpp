// The CUDA driver, opened at run time: no CUDA header or library at build time.
#include "gpu/cuda_driver.hpp"

#include <threechains/error.hpp>

#include <dlfcn.h>

namespace threechains::gpu {
namespace {

struct Loaded {
  Driver driver{};
  std::string failure;  // why it could not be loaded, if it could not
};

template <class Fn>
void resolve(void* library, const char* name, Fn*& slot, std::string& missing) {
  slot = reinterpret_cast<Fn*>(dlsym(library, name));
  if (slot == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
}

Loaded load_driver() {
  Loaded loaded;
  // Never closed: the driver keeps threads and state for the process's life.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    loaded.failure = std::string("no CUDA driver in this process (libcuda.so.1: ") +
                     (why != nullptr ? why : "not found") +
                     "): is an NVIDIA GPU and its driver installed?";
    return loaded;
  }
  Driver& d = loaded.driver;
  std::string missing;
  // The _v2 names are the driver's current ABI of these entry points.
  resolve(library, "cuInit", d.cuInit, missing);
  resolve(library, "cuDriverGetVersion", d.cuDriverGetVersion, missing);
  resolve(library, "cuDeviceGetCount", d.cuDeviceGetCount, missing);
  resolve(library, "cuDeviceGet", d.cuDeviceGet, missing);
  resolve(library, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, missing);
  resolve(library, "cuDeviceGetName", d.cuDeviceGetName, missing);
  resolve(library, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, missing);
  resolve(library, "cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease, missing);
  resolve(library, "cuDevicePrimaryCtxReset_v2", d.cuDevicePrimaryCtxReset, missing);
  resolve(library, "cuCtxSetCurrent", d.cuCtxSetCurrent, missing);
  resolve(library, "cuCtxSynchronize", d.cuCtxSynchronize, missing);
  resolve(library, "cuModuleLoadDataEx", d.cuModuleLoadDataEx, missing);
  resolve(library, "cuModuleGetFunction", d.cuModuleGetFunction, missing);
  resolve(library, "cuModuleUnload", d.cuModuleUnload, missing);
  resolve(library, "cuLaunchKernel", d.cuLaunchKernel, missing);
  resolve(library, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
          d.cuOccupancyMaxActiveBlocksPerMultiprocessor, missing);
  resolve(library, "cuStreamCreate", d.cuStreamCreate, missing);
  resolve(library, "cuStreamDestroy_v2", d.cuStreamDestroy, missing);
  resolve(library, "cuStreamQuery", d.cuStreamQuery, missing);
  resolve(library, "cuStreamSynchronize", d.cuStreamSynchronize, missing);
  resolve(library, "cuMemAlloc_v2", d.cuMemAlloc, missing);
  resolve(library, "cuMemFree_v2", d.cuMemFree, missing);
  resolve(library, "cuMemHostAlloc", d.cuMemHostAlloc, missing);
  resolve(library, "cuMemFreeHost", d.cuMemFreeHost, missing);
  resolve(library, "cuMemHostGetDevicePointer_v2", d.cuMemHostGetDevicePointer, missing);
  resolve(library, "cuMemHostRegister_v2", d.cuMemHostRegister, missing);
  resolve(library, "cuMemHostUnregister", d.cuMemHostUnregister, missing);
  resolve(library, "cuMemcpyHtoD_v2", d.cuMemcpyHtoD, missing);
  resolve(library, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH, missing);
  resolve(library, "cuMemcpyHtoDAsync_v2", d.cuMemcpyHtoDAsync, missing);
  resolve(library, "cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync, missing);
  resolve(library, "cuMemsetD8_v2", d.cuMemsetD8, missing);
  resolve(library, "cuEventCreate", d.cuEventCreate, missing);
  resolve(library, "cuEventRecord", d.cuEventRecord, missing);
  resolve(library, "cuEventSynchronize", d.cuEventSynchronize, missing);
  resolve(library, "cuEventElapsedTime", d.cuEventElapsedTime, missing);
  resolve(library, "cuEventDestroy_v2", d.cuEventDestroy, missing);
  resolve(library, "cuMemGetAddressRange_v2", d.cuMemGetAddressRange, missing);
  resolve(library, "cuIpcGetMemHandle", d.cuIpcGetMemHandle, missing);
  resolve(library, "cuIpcOpenMemHandle_v2", d.cuIpcOpenMemHandle, missing);
  resolve(library, "cuIpcCloseMemHandle", d.cuIpcCloseMemHandle, missing);
  resolve(library, "cuGetErrorName", d.cuGetErrorName, missing);
  resolve(library, "cuGetErrorString", d.cuGetErrorString, missing);
  if (!missing.empty()) {
    loaded.failure = "the CUDA driver (libcuda.so.1) lacks " + missing +
                     ": it is older than ThreeChains needs (CUDA 11 or later)";
    return loaded;
  }
  if (const CUresult r = d.cuInit(0); r != CUDA_SUCCESS)
    loaded.failure = "the CUDA driver did not initialise: cuInit: " + d.describe(r);
  return loaded;
}

}  // namespace

const Driver& Driver::get() {
  static const Loaded loaded = load_driver();
  if (!loaded.failure.empty()) throw Error(errc::gpu_failed, loaded.failure);
  return loaded.driver;
}

std::string Driver::describe(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (cuGetErrorString == nullptr || cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  std::string out = name != nullptr ? name : "CUDA error " + std::to_string(result);
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

}  // namespace threechains::gpu
