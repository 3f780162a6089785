// Which JIT'd function holds an address: the names fault reports (and anyone
// asking JitCache::function_at) give to an instruction in injected code.
// Filled by a JITLink plugin as objects are linked, emptied as they are
// removed: on the thread that loads and evicts, since LLJIT (built without
// compile threads) links on the thread that looks up, and a JitCache is used
// by one thread at a time. Read without allocating or locking, so a signal
// handler on that thread can ask while an ifunc runs there (not while the
// thread is inside a JitCache call that links or evicts).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace llvm::orc {
class ObjectLinkingLayer;
}

namespace threechains::jit {

class FunctionTable {
 public:
  struct Function {
    uint64_t end = 0;  // one past the last byte
    std::string name;
  };

  // The function at `address`, and how far into it; nullptr if none.
  [[nodiscard]] const std::string* find(uint64_t address, uint64_t& offset) const noexcept;

  // Records into this table what `layer` links from now on, and forgets it as
  // it is removed. The table must outlive the layer (JitCache::Impl declares
  // it first).
  void watch(llvm::orc::ObjectLinkingLayer& layer);

  // For the plugin: what one link defined, under its resource key.
  void add(uint64_t key, uint64_t begin, Function function);
  void forget(uint64_t key);
  void transfer(uint64_t to, uint64_t from);

 private:
  std::map<uint64_t, Function> by_address_;                    // begin -> function
  std::unordered_map<uint64_t, std::vector<uint64_t>> owned_;  // resource key -> begins
};

}  // namespace threechains::jit
