// Internal: JITLink memory chosen by JITDylib (issue 33). Code confined to
// a window must be linked into that window (jit/window_memory.hpp); every
// other dylib's code goes where it always went. One ObjectLinkingLayer, one
// memory manager: this one, which hands each graph to the manager of the
// window its dylib is routed to, or to the fallback.
#pragma once

#include "confine/window.hpp"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ExecutionEngine/JITLink/JITLinkMemoryManager.h>

#include <memory>
#include <mutex>
#include <vector>

namespace threechains::jit {

class WindowMemoryMapper;

class RoutedMemoryManager final : public llvm::jitlink::JITLinkMemoryManager {
 public:
  explicit RoutedMemoryManager(std::unique_ptr<llvm::jitlink::JITLinkMemoryManager> fallback)
      : fallback_(std::move(fallback)) {}
  ~RoutedMemoryManager() override;

  // Graphs linked for `dylib` from now on go into `window`, which must
  // outlive this manager (its memory manager lives as long as this one:
  // what it linked may be deallocated any time before).
  void route(const llvm::jitlink::JITLinkDylib* dylib, confined::Window& window);
  // `dylib`'s later graphs go to the fallback again (what it linked stays
  // where it is until it is deallocated). Routes are by address: a dylib
  // that is cleared and reused (the JitCache keeps spare ones) must be
  // unrouted first, or another key's code lands in this window.
  void unroute(const llvm::jitlink::JITLinkDylib* dylib);

  // Whether graphs linked for `dylib` go into a window.
  [[nodiscard]] bool routes(const llvm::jitlink::JITLinkDylib* dylib);

  // The mapper that links into `window`, once something was routed there
  // (nullptr before); it lives as long as this manager.
  [[nodiscard]] WindowMemoryMapper* mapper_of(const confined::Window& window);

  void allocate(const llvm::jitlink::JITLinkDylib* dylib, llvm::jitlink::LinkGraph& graph,
                OnAllocatedFunction on_allocated) override;
  using JITLinkMemoryManager::allocate;
  void deallocate(std::vector<FinalizedAlloc> allocations,
                  OnDeallocatedFunction on_deallocated) override;
  using JITLinkMemoryManager::deallocate;

 private:
  struct InWindow {
    const confined::Window* window;
    std::unique_ptr<llvm::jitlink::JITLinkMemoryManager> memory;
    WindowMemoryMapper* mapper;  // owned by `memory`
  };

  std::mutex mutex_;
  std::unique_ptr<llvm::jitlink::JITLinkMemoryManager> fallback_;
  std::vector<std::unique_ptr<InWindow>> windows_;  // one per window routed to
  llvm::DenseMap<const llvm::jitlink::JITLinkDylib*, InWindow*> routes_;
};

}  // namespace threechains::jit
