// The function table's JITLink plugin: callable named symbols, with their
// sizes, recorded after a link's fixups (addresses final) and committed when
// the link is emitted.
#include "jit/function_table.hpp"

#include <llvm/ADT/DenseSet.h>
#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>

#include <mutex>
#include <utility>

namespace threechains::jit {

const std::string* FunctionTable::find(uint64_t address, uint64_t& offset) const noexcept {
  auto after = by_address_.upper_bound(address);
  if (after == by_address_.begin()) return nullptr;
  const auto& [begin, function] = *std::prev(after);
  if (address >= function.end) return nullptr;
  offset = address - begin;
  return &function.name;
}

void FunctionTable::add(uint64_t key, uint64_t begin, Function function) {
  by_address_.insert_or_assign(begin, std::move(function));
  owned_[key].push_back(begin);
}

void FunctionTable::forget(uint64_t key) {
  const auto it = owned_.find(key);
  if (it == owned_.end()) return;
  for (const uint64_t begin : it->second) by_address_.erase(begin);
  owned_.erase(it);
}

void FunctionTable::transfer(uint64_t to, uint64_t from) {
  const auto it = owned_.find(from);
  if (it == owned_.end()) return;
  std::vector<uint64_t> begins = std::move(it->second);
  owned_.erase(it);
  auto& target = owned_[to];
  target.insert(target.end(), begins.begin(), begins.end());
}

namespace {

// A local function's symbol as it was before pruning.
struct LocalFunction {
  llvm::jitlink::Block* block;
  llvm::orc::ExecutorAddrDiff offset;
  llvm::orc::ExecutorAddrDiff size;
  llvm::orc::SymbolStringPtr name;
};

}  // namespace

void find_functions(llvm::jitlink::PassConfiguration& config, FoundFunctions found) {
  // Calls to a static function usually relocate against its section, not
  // its symbol, so JITLink prunes the symbol as dead while the code stays
  // (reached through the section): its instructions would then be named
  // after the function before it, here and in perf. The names of local
  // functions are noted before pruning and put back, after it, on the
  // blocks that survived; nothing is kept alive that was not already.
  auto local_functions = std::make_shared<std::vector<LocalFunction>>();
  config.PrePrunePasses.push_back([local_functions](llvm::jitlink::LinkGraph& graph) {
    for (llvm::jitlink::Symbol* symbol : graph.defined_symbols()) {
      if (symbol->hasName() && symbol->isCallable() &&
          symbol->getScope() == llvm::jitlink::Scope::Local && !symbol->isLive()) {
        local_functions->push_back(
            {&symbol->getBlock(), symbol->getOffset(), symbol->getSize(), symbol->getName()});
      }
    }
    return llvm::Error::success();
  });
  config.PostPrunePasses.push_back([local_functions](llvm::jitlink::LinkGraph& graph) {
    if (local_functions->empty()) return llvm::Error::success();
    llvm::DenseSet<const llvm::jitlink::Block*> blocks;
    for (const llvm::jitlink::Block* block : graph.blocks()) blocks.insert(block);
    llvm::DenseSet<llvm::orc::SymbolStringPtr> named;
    for (const llvm::jitlink::Symbol* symbol : graph.defined_symbols())
      if (symbol->hasName()) named.insert(symbol->getName());
    for (LocalFunction& function : *local_functions) {
      // Only blocks still in the graph are dereferenced (a pruned block's
      // pointer is compared, never followed).
      if (!blocks.contains(function.block) || named.contains(function.name)) continue;
      graph.addDefinedSymbol(*function.block, function.offset, function.name, function.size,
                             llvm::jitlink::Linkage::Strong, llvm::jitlink::Scope::Local,
                             /*IsCallable=*/true, /*IsLive=*/true);
    }
    return llvm::Error::success();
  });
  config.PostFixupPasses.push_back([found = std::move(found)](llvm::jitlink::LinkGraph& graph) {
    std::vector<std::pair<uint64_t, FunctionTable::Function>> functions;
    for (llvm::jitlink::Symbol* symbol : graph.defined_symbols()) {
      if (!symbol->hasName() || !symbol->isCallable() || symbol->getSize() == 0) continue;
      const uint64_t begin = symbol->getAddress().getValue();
      functions.push_back({begin, {begin + symbol->getSize(), (*symbol->getName()).str()}});
    }
    found(std::move(functions));
    return llvm::Error::success();
  });
}

namespace {

class Recorder final : public llvm::orc::ObjectLinkingLayer::Plugin {
 public:
  explicit Recorder(FunctionTable& table) : table_(table) {}

  void modifyPassConfig(llvm::orc::MaterializationResponsibility& responsibility,
                        llvm::jitlink::LinkGraph&,
                        llvm::jitlink::PassConfiguration& config) override {
    find_functions(config, [this, &responsibility](
                               std::vector<std::pair<uint64_t, FunctionTable::Function>> found) {
      const std::lock_guard lock(mutex_);
      pending_[&responsibility] = std::move(found);
    });
  }

  llvm::Error notifyEmitted(llvm::orc::MaterializationResponsibility& responsibility) override {
    std::vector<std::pair<uint64_t, FunctionTable::Function>> functions;
    {
      const std::lock_guard lock(mutex_);
      const auto it = pending_.find(&responsibility);
      if (it == pending_.end()) return llvm::Error::success();
      functions = std::move(it->second);
      pending_.erase(it);
    }
    return responsibility.withResourceKeyDo([&](llvm::orc::ResourceKey key) {
      for (auto& [begin, function] : functions) table_.add(key, begin, std::move(function));
    });
  }

  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility& responsibility) override {
    const std::lock_guard lock(mutex_);
    pending_.erase(&responsibility);
    return llvm::Error::success();
  }

  llvm::Error notifyRemovingResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey key) override {
    table_.forget(key);
    return llvm::Error::success();
  }

  void notifyTransferringResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey to,
                                   llvm::orc::ResourceKey from) override {
    table_.transfer(to, from);
  }

 private:
  FunctionTable& table_;  // JitCache::Impl's, declared before the JIT that owns this plugin
  // pending_ is guarded for form's sake; the table itself has one writer, the
  // thread that loads and evicts (LLJIT materialises in place, on the thread
  // that looks up: JitCache::Impl builds it without compile threads).
  std::mutex mutex_;
  std::unordered_map<const llvm::orc::MaterializationResponsibility*,
                     std::vector<std::pair<uint64_t, FunctionTable::Function>>>
      pending_;
};

}  // namespace

void FunctionTable::watch(llvm::orc::ObjectLinkingLayer& layer) {
  layer.addPlugin(std::make_unique<Recorder>(*this));
}

}  // namespace threechains::jit
