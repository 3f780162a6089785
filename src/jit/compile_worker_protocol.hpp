// Internal: how a JitCache hands confined bitcode to a compile worker
// (compile_worker.cpp, the parent side; compile_worker_main.cpp, the
// worker). Bitcode from a signer not trusted with native code is parsed,
// optimised, confined and compiled in a process of its own, started fresh
// for each compile: whatever that bitcode makes LLVM do (abort on a fatal
// error, crash, loop, allocate without end) costs that process, never the
// target, and a worker one peer's bitcode subverted never compiles another
// peer's.
//
// No pipes to keep flowing: four descriptors the parent made, each a memfd.
//   3  in   the job: a JobHeader, the ifunc's name, the bitcode
//   4  out  the object the worker compiled (ELF, relocatable)
//   5  out  why it refused: the errc's number, a newline, the message
//   1, 2    stdout and stderr: LLVM's own last words when it dies
// The exit status says which: kExitCompiled, kExitRefused, anything else a
// crash (a signal, a fatal LLVM error, over a limit).
#pragma once

#include <cstdint>

namespace threechains::compile_worker {

inline constexpr int kJobFd = 3;
inline constexpr int kObjectFd = 4;
inline constexpr int kRefusalFd = 5;

inline constexpr int kExitCompiled = 0;
inline constexpr int kExitRefused = 3;
inline constexpr int kExitFatal = 4;  // LLVM reported a fatal error (its text on stderr)
inline constexpr int kExitUsage = 2;

inline constexpr uint64_t kMagic = 0x3343'4357'4f52'4b32;  // "3CCWORK2": window_shape

struct JobHeader {
  uint64_t magic = kMagic;
  int32_t optimisation_level = 2;  // JitOptions::optimisation_level
  int32_t codegen_level = 2;       // JitOptions::codegen_level
  uint32_t window_shape = 0;       // 1: ConfinementOptions::window_tier (the shape where it takes)
  uint32_t reserved = 0;
  uint64_t max_global_bytes = 0;  // ConfinementOptions::max_global_bytes
  uint64_t memory_limit = 0;      // bytes of address space (RLIMIT_AS); 0: none
  uint64_t cpu_seconds = 0;       // RLIMIT_CPU: the backstop to the parent's clock
  uint64_t output_limit = 0;      // bytes the worker may write (RLIMIT_FSIZE)
  uint64_t name_bytes = 0;
  uint64_t bitcode_bytes = 0;
  // Then: the name, the bitcode. The worker describes this host itself
  // (host_description.hpp): it runs here.
};

}  // namespace threechains::compile_worker
