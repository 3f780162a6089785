// Internal: the part of the CUDA driver API the GPU executor uses, opened at
// run time with dlopen("libcuda.so.1"), so the library builds and runs where
// there is no CUDA at all. The types are declared here as the driver's ABI
// has them (cuda.h is not needed to build).
#pragma once

#include <cstddef>
#include <string>

namespace threechains::gpu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

// A device allocation as another process opens it (cuIpcGetMemHandle).
struct CUipcMemHandle {
  char reserved[64];
};

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
inline constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
inline constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
inline constexpr int CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr int CU_JIT_WALL_TIME = 2;
inline constexpr int CU_JIT_INFO_LOG_BUFFER = 3;
inline constexpr int CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
inline constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
inline constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
inline constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 1;
inline constexpr unsigned CU_MEMHOSTALLOC_DEVICEMAP = 2;
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
inline constexpr unsigned CU_MEMHOSTREGISTER_PORTABLE = 1;
inline constexpr unsigned CU_MEMHOSTREGISTER_DEVICEMAP = 2;
inline constexpr unsigned CU_EVENT_DEFAULT = 0;
inline constexpr unsigned CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1;

// The driver's entry points, resolved once per process.
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuDevicePrimaryCtxReset)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, std::size_t);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemHostAlloc)(void**, std::size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);
  CUresult (*cuMemHostRegister)(void*, std::size_t, unsigned);
  CUresult (*cuMemHostUnregister)(void*);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, std::size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, std::size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, std::size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, std::size_t, CUstream);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, std::size_t);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuMemGetAddressRange)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned);
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);

  // The driver of this process, loaded and initialised (cuInit) on first use.
  // Throws Error(errc::gpu_failed) saying what is missing: no libcuda.so.1
  // (no NVIDIA driver), an entry point it lacks (too old), cuInit's error.
  [[nodiscard]] static const Driver& get();

  // "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)".
  [[nodiscard]] std::string describe(CUresult result) const;
};

}  // namespace threechains::gpu
