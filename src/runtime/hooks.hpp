// Internal: how the C runtime entry points (compiled into the library, where
// JIT'd code finds them) reach the Node that is running an ifunc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace threechains::detail {

struct RuntimeHooks {
  void* node = nullptr;
  int64_t (*rank)(void* node) = nullptr;
  int64_t (*ranks)(void* node) = nullptr;
  int64_t (*origin)(void* node) = nullptr;
  int (*send_self)(void* node, int64_t rank, const void* payload, std::size_t size) = nullptr;
  int (*send_named)(void* node, int64_t rank, const char* name, const void* payload,
                    std::size_t size) = nullptr;
  void* (*lookup)(void* node, const char* name) = nullptr;
};

// Installs the hooks of the Node whose ifunc runs next on this thread (nullptr:
// none) and returns the ones installed before, to restore after the dispatch.
const RuntimeHooks* exchange_runtime_hooks(const RuntimeHooks* hooks) noexcept;

}  // namespace threechains::detail
