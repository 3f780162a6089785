// Internal: NVPTX bitcode (a container's GPU image) to PTX text for one GPU
// architecture, with LLVM's NVPTX back end: the compile half of GPU ifuncs,
// which needs no GPU (CI runs it).
#pragma once

#include "jit/container_images.hpp"

#include <string>

namespace threechains::gpu {

struct PtxOptions {
  std::string arch = "sm_90";  // the GPU's compute capability, as LLVM names it
  int optimisation_level = 3;  // middle end: 0 none, 1..3 O1..O3
  std::string libdevice;       // libdevice.10.bc, for code that calls __nv_* (empty: none)
};

struct Ptx {
  std::string text;   // PTX assembly, NUL-terminated in c_str() for cuModuleLoadDataEx
  std::string entry;  // the kernel: <name>_main
};

// Compiles `image` (bitcode for nvptx64) for options.arch. Its imports are
// checked first: a GPU image may call libdevice's __nv_* functions (linked
// from options.libdevice) and LLVM intrinsics, nothing else. Throws Error:
// bad_container (not NVPTX bitcode), symbol_not_found (no kernel
// <name>_main), import_refused, dependency_not_found (libdevice needed but
// not found), jit_failed (LLVM could not compile it).
[[nodiscard]] Ptx compile_ptx(const ParsedImage& image, const PtxOptions& options);

// libdevice.10.bc where CUDA or Debian's nvidia-cuda-toolkit put it ("" if
// none): $CUDA_HOME, /usr/local/cuda, /usr/lib/nvidia-cuda-toolkit.
[[nodiscard]] std::string find_libdevice();

}  // namespace threechains::gpu
