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

// The research prototype's load: dlopen(RTLD_NOW) + dlsym(`symbol`) of
// `shared_object`, copied first to /dev/shm (tmpfs); each load_us() is one
// round (timed: open and lookup; then dlclose, the last reference, so the next
// round maps it again). Throws std::runtime_error if it cannot be loaded.
class DlopenLoader {
 public:
  DlopenLoader(const std::string& shared_object, std::string symbol);
  ~DlopenLoader();
  DlopenLoader(const DlopenLoader&) = delete;
  DlopenLoader& operator=(const DlopenLoader&) = delete;
  [[nodiscard]] double load_us();

 private:
  std::string copy_;
  std::string symbol_;
};

// The median of `rounds` DlopenLoader rounds.
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
