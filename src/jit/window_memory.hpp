// Internal: JITLink memory inside a confinement window (issue 33). Window-
// shaped code reaches only its window (confine/window.hpp), so the globals
// it addresses, and its code, must be linked there: a
// MapperJITLinkMemoryManager over this mapper puts every segment of every
// graph it links into `window`, with the protection the segment asks for
// (code read and execute, constants read only, data read and write; never
// writable and executable at once). Shaped code can then read its code and
// constants and write its data, and a write to the others faults, which
// confine/window_traps.hpp answers as a trap.
//
// Pages of a reservation are inaccessible except while a linked graph
// holds them: JITLink writes a graph into working memory of its own, and
// initialize() opens the pages, copies it there and protects each segment.
// What an evicted module held is dropped, not left for the next module to
// read: its pages are replaced by fresh inaccessible ones when it is
// unlinked. The graph's allocation actions are never run (window code is
// not registered, unwound through or initialised by the host).
#pragma once

#include "confine/verify_x86.hpp"
#include "confine/window.hpp"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ExecutionEngine/Orc/MemoryMapper.h>

#include <mutex>
#include <span>
#include <vector>

namespace threechains::jit {

class WindowMemoryMapper final : public llvm::orc::MemoryMapper {
 public:
  // `window` must outlive this mapper and the memory manager that owns it.
  explicit WindowMemoryMapper(confined::Window& window) : window_(window) {}
  ~WindowMemoryMapper() override;

  unsigned int getPageSize() override;
  void reserve(size_t bytes, OnReservedFunction on_reserved) override;
  char* prepare(llvm::jitlink::LinkGraph& graph, llvm::orc::ExecutorAddr address,
                size_t content_size) override;
  void initialize(AllocInfo& allocation, OnInitializedFunction on_initialized) override;
  void deinitialize(llvm::ArrayRef<llvm::orc::ExecutorAddr> allocations,
                    OnDeinitializedFunction on_deinitialized) override;
  void release(llvm::ArrayRef<llvm::orc::ExecutorAddr> reservations,
               OnReleasedFunction on_released) override;

  // The executable segments of everything linked into the window now, as
  // the verifier reads them (confine/verify_x86.hpp). Once linked they are
  // read-only, so nothing running in the window can change them after they
  // are verified; the spans stay valid until their module is unlinked.
  [[nodiscard]] std::vector<confined::CodeRange> executable_code();
  // The writable segments of everything linked into the window now (its
  // data and zero-initialised globals): what the confined tier sets back
  // to how it was linked when the code runs for another caller.
  [[nodiscard]] std::vector<std::span<std::byte>> writable_data();

 private:
  struct Initialized {
    std::size_t bytes = 0;                   // from its address, whole pages
    std::vector<confined::CodeRange> code;   // its executable segments
    std::vector<std::span<std::byte>> data;  // its writable segments
  };
  // Replaces one allocation's pages with fresh inaccessible ones; the
  // caller holds mutex_.
  llvm::Error unlink(llvm::orc::ExecutorAddr address);

  confined::Window& window_;
  std::mutex mutex_;
  llvm::DenseMap<llvm::orc::ExecutorAddr, std::size_t> reservations_;  // address -> bytes
  llvm::DenseMap<llvm::orc::ExecutorAddr, Initialized> initialized_;
};

}  // namespace threechains::jit
