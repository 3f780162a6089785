// What routed_memory.hpp says.
#include "jit/routed_memory.hpp"

#include "jit/window_memory.hpp"

#include <llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h>

#include <algorithm>
#include <iterator>

namespace threechains::jit {

namespace {
// What a window's manager reserves at a time: small, since every key's
// window starts with one.
constexpr std::size_t kWindowReservation = std::size_t{1} << 20;
}  // namespace

RoutedMemoryManager::~RoutedMemoryManager() = default;

void RoutedMemoryManager::route(const llvm::jitlink::JITLinkDylib* dylib,
                                confined::Window& window) {
  const std::lock_guard<std::mutex> lock(mutex_);
  InWindow* in = nullptr;
  for (const std::unique_ptr<InWindow>& known : windows_)
    if (known->window == &window) in = known.get();
  if (in == nullptr) {
    auto mapper = std::make_unique<WindowMemoryMapper>(window);
    WindowMemoryMapper* const kept = mapper.get();
    windows_.push_back(
        std::make_unique<InWindow>(InWindow{&window,
                                            std::make_unique<llvm::orc::MapperJITLinkMemoryManager>(
                                                kWindowReservation, std::move(mapper)),
                                            kept}));
    in = windows_.back().get();
  }
  routes_[dylib] = in;
}

void RoutedMemoryManager::unroute(const llvm::jitlink::JITLinkDylib* dylib) {
  const std::lock_guard<std::mutex> lock(mutex_);
  routes_.erase(dylib);
}

bool RoutedMemoryManager::routes(const llvm::jitlink::JITLinkDylib* dylib) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return routes_.contains(dylib);
}

WindowMemoryMapper* RoutedMemoryManager::mapper_of(const confined::Window& window) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const std::unique_ptr<InWindow>& known : windows_)
    if (known->window == &window) return known->mapper;
  return nullptr;
}

void RoutedMemoryManager::allocate(const llvm::jitlink::JITLinkDylib* dylib,
                                   llvm::jitlink::LinkGraph& graph,
                                   OnAllocatedFunction on_allocated) {
  llvm::jitlink::JITLinkMemoryManager* memory = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto route = routes_.find(dylib);
    memory = route == routes_.end() ? fallback_.get() : route->second->memory.get();
  }
  memory->allocate(dylib, graph, std::move(on_allocated));
}

void RoutedMemoryManager::deallocate(std::vector<FinalizedAlloc> allocations,
                                     OnDeallocatedFunction on_deallocated) {
  // Each allocation back to the manager that made it: the window it lies
  // in, or the fallback.
  std::vector<std::pair<llvm::jitlink::JITLinkMemoryManager*, std::vector<FinalizedAlloc>>>
      by_manager;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (FinalizedAlloc& allocation : allocations) {
      llvm::jitlink::JITLinkMemoryManager* memory = fallback_.get();
      for (const std::unique_ptr<InWindow>& in : windows_)
        if (in->window->contains(allocation.getAddress().toPtr<const void*>(), 1))
          memory = in->memory.get();
      auto it = std::find_if(by_manager.begin(), by_manager.end(),
                             [&](const auto& entry) { return entry.first == memory; });
      if (it == by_manager.end()) {
        by_manager.emplace_back(memory, std::vector<FinalizedAlloc>{});
        it = std::prev(by_manager.end());
      }
      it->second.push_back(std::move(allocation));
    }
  }
  llvm::Error all = llvm::Error::success();
  for (auto& [memory, mine] : by_manager)
    all = llvm::joinErrors(std::move(all), memory->deallocate(std::move(mine)));
  on_deallocated(std::move(all));
}

}  // namespace threechains::jit
