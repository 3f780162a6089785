// Which JIT'd function holds an address: the names fault reports (and anyone
// asking JitCache::function_at) give to an instruction in injected code.
// Filled by a JITLink plugin as objects are linked, emptied as they are
// removed: on the thread that loads and evicts, since LLJIT (built without
// compile threads) links on the thread that looks up, and a JitCache is used
// by one thread at a time. Window code is linked without ORC, perhaps on
// another thread (jit/window_link.hpp): that thread only collects its
// functions, and the loading thread enters them, keyed by the window's
// base, when it takes the link back. Read without allocating or locking, so a signal
// handler on that thread can ask while an ifunc runs there (not while the
// thread is inside a JitCache call that links or evicts).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace llvm::orc {
class ObjectLinkingLayer;
}
namespace llvm::jitlink {
struct PassConfiguration;
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

  // What one link defined, under its key: an ORC resource key (the
  // plugin's), or a window's base (JitCache's window links).
  void add(uint64_t key, uint64_t begin, Function function);
  void forget(uint64_t key);
  void transfer(uint64_t to, uint64_t from);

 private:
  std::map<uint64_t, Function> by_address_;                    // begin -> function
  std::unordered_map<uint64_t, std::vector<uint64_t>> owned_;  // resource key -> begins
};

// Adds to a link's passes what finds its named functions (the table's
// plugin, and window links, which have no session: jit/window_link.hpp).
// Local functions whose names JITLink would prune with their symbols are
// named again; after the fixups, `found` is handed every named callable
// symbol with its final address and size.
using FoundFunctions =
    std::function<void(std::vector<std::pair<uint64_t, FunctionTable::Function>>)>;
void find_functions(llvm::jitlink::PassConfiguration& config, FoundFunctions found);

}  // namespace threechains::jit
