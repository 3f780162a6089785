// What threechains-bench-jit compares a load with: the research prototype's
// way (dlopen + dlsym of the same code built as a shared object, from tmpfs)
// and a stock ORC LLJIT doing what the JitCache does with bitcode.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace bench {

// Median microseconds of `rounds` dlopen(RTLD_NOW) + dlsym(`symbol`) +
// dlclose of `shared_object`, copied first to /dev/shm (tmpfs). Throws
// std::runtime_error if it cannot be loaded.
[[nodiscard]] double dlopen_median_us(const std::string& shared_object, const std::string& symbol,
                                      int rounds);

// A stock LLJIT (LLJITBuilder defaults: host CPU, JITLink) doing what the
// JitCache does with bitcode: load() makes a JITDylib with the process's
// symbols, parses, runs LLVM's O<level> pipeline on the module (none if 0)
// with the JIT's TargetMachine, generates code, links, looks up `symbol`,
// and removes the JITDylib; it returns the microseconds that took.
class StockLljit {
 public:
  explicit StockLljit(int optimisation_level);
  ~StockLljit();
  StockLljit(const StockLljit&) = delete;
  StockLljit& operator=(const StockLljit&) = delete;
  [[nodiscard]] double load_us(const std::vector<std::byte>& bitcode, const std::string& symbol);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bench
