// What window_link.hpp says.
#include "jit/window_link.hpp"

#include <threechains/error.hpp>

#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/SymbolStringPool.h>
#include <llvm/Support/MemoryBuffer.h>

#include <memory>
#include <optional>

namespace threechains::jit {

namespace {

llvm::Error refusal(const std::string& what) {
  return llvm::make_error<llvm::StringError>(what, llvm::inconvertibleErrorCode());
}

// Sections whose code something other than the entry would run.
llvm::Error refuse_initialisers(llvm::jitlink::LinkGraph& graph) {
  for (const llvm::jitlink::Section& section : graph.sections()) {
    const llvm::StringRef name = section.getName();
    for (const llvm::StringRef refused :
         {".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors", ".init", ".fini"}) {
      if (name == refused || name.starts_with((refused + ".").str())) {
        return refusal("window code may not have initialisers or finalisers (section " +
                       name.str() + ")");
      }
    }
  }
  return llvm::Error::success();
}

// The link's end, as JITLink reports it: the memory manager over a
// WindowMemoryMapper answers at once, so every report comes before
// jitlink::link returns, on the calling thread. Shared with the context
// all the same: a manager that answered later would find it alive (the
// link then fails as unfinished, and what it allocated stays allocated).
struct Outcome {
  std::optional<llvm::Error> failed;
  llvm::jitlink::JITLinkMemoryManager::FinalizedAlloc allocation;
  bool finalised = false;
  uint64_t entry = 0;
  std::vector<std::pair<uint64_t, FunctionTable::Function>> functions;
};

class WindowLinkContext final : public llvm::jitlink::JITLinkContext {
 public:
  WindowLinkContext(llvm::jitlink::JITLinkMemoryManager& memory, std::string entry,
                    std::shared_ptr<Outcome> outcome)
      : JITLinkContext(nullptr),
        memory_(memory),
        entry_(std::move(entry)),
        outcome_(std::move(outcome)) {}

  llvm::jitlink::JITLinkMemoryManager& getMemoryManager() override { return memory_; }

  void notifyFailed(llvm::Error error) override { outcome_->failed = std::move(error); }

  // Nothing outside the window is linked against: what the object imports
  // is named and refused (an import it may do without, a weak one,
  // resolves to null, as it would with nothing to define it).
  void lookup(const LookupMap& symbols,
              std::unique_ptr<llvm::jitlink::JITLinkAsyncLookupContinuation> then) override {
    llvm::jitlink::AsyncLookupResult result;
    std::string imports;
    for (const auto& [name, flags] : symbols) {
      if (flags == llvm::jitlink::SymbolLookupFlags::WeaklyReferencedSymbol) {
        result[name] = llvm::orc::ExecutorSymbolDef();
        continue;
      }
      imports += (imports.empty() ? "'" : ", '") + (*name).str() + "'";
    }
    if (!imports.empty()) {
      then->run(
          refusal("window code links against nothing outside its window; it imports " + imports));
      return;
    }
    then->run(std::move(result));
  }

  llvm::Error notifyResolved(llvm::jitlink::LinkGraph& /*graph*/) override {
    return llvm::Error::success();
  }

  void notifyFinalized(llvm::jitlink::JITLinkMemoryManager::FinalizedAlloc allocation) override {
    outcome_->allocation = std::move(allocation);
    outcome_->finalised = true;
  }

  // As ORC's linking layer would for an object it was handed: what the
  // object defines for others (not local) stays, and what that reaches.
  llvm::jitlink::LinkGraphPassFunction getMarkLivePass(
      const llvm::Triple& /*triple*/) const override {
    return [](llvm::jitlink::LinkGraph& graph) {
      for (llvm::jitlink::Symbol* symbol : graph.defined_symbols())
        if (symbol->getScope() != llvm::jitlink::Scope::Local) symbol->setLive(true);
      return llvm::Error::success();
    };
  }

  llvm::Error modifyPassConfig(llvm::jitlink::LinkGraph& /*graph*/,
                               llvm::jitlink::PassConfiguration& config) override {
    config.PrePrunePasses.push_back(refuse_initialisers);
    find_functions(config, [outcome = outcome_](
                               std::vector<std::pair<uint64_t, FunctionTable::Function>> found) {
      outcome->functions = std::move(found);
    });
    // The entry as a lookup in ORC found it: defined for others (not
    // local) and callable; two such would not have linked.
    config.PostFixupPasses.push_back(
        [outcome = outcome_, entry = entry_](llvm::jitlink::LinkGraph& graph) {
          for (const llvm::jitlink::Symbol* symbol : graph.defined_symbols()) {
            if (symbol->hasName() && *symbol->getName() == entry &&
                symbol->getScope() != llvm::jitlink::Scope::Local && symbol->isCallable())
              outcome->entry = symbol->getAddress().getValue();
          }
          return llvm::Error::success();
        });
    return llvm::Error::success();
  }

 private:
  llvm::jitlink::JITLinkMemoryManager& memory_;
  const std::string entry_;
  const std::shared_ptr<Outcome> outcome_;
};

}  // namespace

WindowLink WindowLink::link(std::span<const std::byte> object, const std::string& name,
                            const std::string& entry, llvm::jitlink::JITLinkMemoryManager& memory) {
  const auto fail = [&](const std::string& why) {
    return Error(errc::jit_failed, "ifunc '" + name + "': " + why);
  };
  const llvm::MemoryBufferRef buffer(
      llvm::StringRef(reinterpret_cast<const char*>(object.data()), object.size()), name);
  // A pool of its own: this link shares nothing with any other.
  auto graph = llvm::jitlink::createLinkGraphFromObject(
      buffer, std::make_shared<llvm::orc::SymbolStringPool>());
  if (!graph) throw fail(llvm::toString(graph.takeError()));
  auto outcome = std::make_shared<Outcome>();
  llvm::jitlink::link(std::move(*graph),
                      std::make_unique<WindowLinkContext>(memory, entry, outcome));
  if (outcome->failed) throw fail(llvm::toString(std::move(*outcome->failed)));
  if (!outcome->finalised) throw fail("its link into the window did not finish");
  WindowLink linked;
  linked.memory_ = &memory;
  linked.allocation_ = std::move(outcome->allocation);
  linked.entry_ = outcome->entry;
  linked.functions_ = std::move(outcome->functions);
  if (linked.entry_ == 0) throw fail("its object defines no '" + entry + "'");
  return linked;
}

WindowLink& WindowLink::operator=(WindowLink&& other) noexcept {
  if (this == &other) return *this;
  (void)unlink();
  memory_ = std::exchange(other.memory_, nullptr);
  allocation_ = std::move(other.allocation_);
  entry_ = std::exchange(other.entry_, 0);
  functions_ = std::move(other.functions_);
  return *this;
}

bool WindowLink::unlink() noexcept {
  if (memory_ == nullptr) return true;
  llvm::Error error = std::exchange(memory_, nullptr)->deallocate(std::move(allocation_));
  entry_ = 0;
  functions_.clear();
  if (!error) return true;
  llvm::consumeError(std::move(error));
  return false;
}

}  // namespace threechains::jit
