// Internal: one window object linked into its window with JITLink alone, no
// ORC session (issue 32). Window code links against nothing outside its
// window and is never initialised, registered or unwound through
// (jit/window_memory.hpp), so nothing of a session is needed: no symbol
// tables, no JITDylib, no plugins. What that buys is a link that touches
// only its window's memory manager, so it can run beside the serving
// thread (WindowVerification links, then verifies), while every ORC link
// stays on the thread that loads (jit/function_table.hpp).
#pragma once

#include "jit/function_table.hpp"

#include <llvm/ExecutionEngine/JITLink/JITLinkMemoryManager.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace threechains::jit {

class WindowLink {
 public:
  WindowLink() = default;
  // Links `object` with `memory` (a window's, over a WindowMemoryMapper) and
  // finds `entry` in it. Throws Error(errc::jit_failed) with JITLink's
  // reason, or with the names of what the object imports, or if it has
  // initialisers or finalisers (nothing would run them). `memory` must
  // outlive the link returned.
  [[nodiscard]] static WindowLink link(std::span<const std::byte> object, const std::string& name,
                                       const std::string& entry,
                                       llvm::jitlink::JITLinkMemoryManager& memory);
  ~WindowLink() { (void)unlink(); }
  WindowLink(WindowLink&& other) noexcept { *this = std::move(other); }
  WindowLink& operator=(WindowLink&& other) noexcept;
  WindowLink(const WindowLink&) = delete;
  WindowLink& operator=(const WindowLink&) = delete;

  [[nodiscard]] bool linked() const noexcept { return memory_ != nullptr; }
  [[nodiscard]] uint64_t entry() const noexcept { return entry_; }
  // Its named functions, by first byte, for the function table (which only
  // the serving thread writes: it enters them once the link is taken).
  [[nodiscard]] const std::vector<std::pair<uint64_t, FunctionTable::Function>>& functions()
      const noexcept {
    return functions_;
  }
  // Gives its memory back (its pages inaccessible again). False if the
  // manager could not: the window is then not to hold other code.
  [[nodiscard]] bool unlink() noexcept;

 private:
  llvm::jitlink::JITLinkMemoryManager* memory_ = nullptr;  // the window's; outlives this
  llvm::jitlink::JITLinkMemoryManager::FinalizedAlloc allocation_;
  uint64_t entry_ = 0;
  std::vector<std::pair<uint64_t, FunctionTable::Function>> functions_;
};

}  // namespace threechains::jit
