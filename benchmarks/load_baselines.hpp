// What threechains-bench-jit compares a load with: the research prototype's
// way (dlopen + dlsym of the same code built as a shared object, from tmpfs)
// and a stock ORC LLJIT doing what the JitCache does with bitcode.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace bench {

// Median microseconds of `rounds` dlopen(RTLD_NOW) + dlsym(`symbol`) +
// dlclose of `shared_object`, copied first to /dev/shm (tmpfs). Throws
// std::runtime_error if it cannot be loaded.
[[nodiscard]] double dlopen_median_us(const std::string& shared_object, const std::string& symbol,
                                      int rounds);

// Median microseconds of `rounds` loads of `bitcode` (one module) by a stock
// LLJIT (LLJITBuilder defaults: host CPU, JITLink): a JITDylib with the
// process's symbols, parse, LLVM's O<level> pipeline on the module (none if
// 0) with the JIT's TargetMachine, code generation, link, lookup of
// `symbol`, and removal of the JITDylib.
[[nodiscard]] double stock_lljit_median_us(const std::vector<std::byte>& bitcode,
                                           const std::string& symbol, int optimisation_level,
                                           int rounds);

}  // namespace bench
