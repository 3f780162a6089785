// Internal: memory a target exposes to window code without a copy (issue
// 33, "data where the code can reach it"). Window-shaped code reaches only
// its window, so memory of the host it is to use must appear there. The
// arena is a memfd mapped twice over: once in the host (the span the
// application writes through) and once in every window, at the same offset
// in the window's shared half (confine/window.hpp). The host's mapping lies
// in a 4 GiB-aligned reservation of its own, so a host pointer's low 32
// bits are its offset in every window: a pointer the host hands window code
// (target_args, a pointer in a payload) means the same memory there.
//
// Read-only pieces are mapped read-only into windows. Every window sees
// every piece (as every confined ifunc sees every exposed region); what is
// not handed out stays unmapped and faults.
#pragma once

#include "confine/window.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace threechains::confined {

class ExposureArena {
 public:
  // Throws Error(errc::limit_exceeded) if no memfd or address space is left.
  ExposureArena();
  ~ExposureArena();
  ExposureArena(const ExposureArena&) = delete;
  ExposureArena& operator=(const ExposureArena&) = delete;

  // `bytes` (whole pages) of zeroed memory, mapped into the host and into
  // every window attached now or later, writable there if `writable`.
  // Throws Error(errc::limit_exceeded) past the 2 GiB of the shared half.
  [[nodiscard]] std::span<std::byte> allocate(std::size_t bytes, bool writable);

  // Maps every piece into `window`, and later pieces too (again, for a
  // window whose reservation was replaced). `window` must outlive the
  // arena (a JitCache declares its windows before its arena).
  void attach(Window& window);

  // Whether [address, address + bytes) lies in a piece handed out (on the
  // hot path of every window invocation: two compares).
  [[nodiscard]] bool contains(const void* address, std::size_t bytes) const noexcept {
    const std::byte* const begin = host_view_.base() + Window::kShared;
    const auto* const at = static_cast<const std::byte*>(address);
    return at >= begin && static_cast<uint64_t>(at - begin) <= size_ &&
           bytes <= size_ - static_cast<uint64_t>(at - begin);
  }

 private:
  struct Piece {
    uint64_t offset;  // in the arena's file and, plus Window::kShared, in a window
    std::size_t bytes;
    bool writable;
  };
  int fd_ = -1;
  Window host_view_;   // address space only: the host's mapping of the file
  uint64_t size_ = 0;  // of the file
  std::vector<Piece> pieces_;
  std::vector<Window*> windows_;
};

}  // namespace threechains::confined
