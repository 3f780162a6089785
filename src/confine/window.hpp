// Internal: a confinement window (issue 33), the address range that guard-
// region confinement lets code reach. Code shaped for a window
// (shape_for_window, confine/pass.hpp) computes every address it loads or
// stores through as the low 32 bits of its pointer, added to the thread's
// %gs base (x86-64), so whatever value it forms, it touches
// [base, base + 4 GiB) plus the width of one access. The window is 4 GiB
// aligned, so a real pointer into it keeps its meaning: its low 32 bits are
// its offset from the base. Pages in it are inaccessible until allocate()
// maps them, and guard reservations on both sides take any displacement a
// 32-bit field can encode, so a stray access faults instead of landing in
// the process.
//
// Why %gs on x86-64, and not a reserved base register as LFI uses on Arm64:
// LLVM cannot reserve a general register on x86-64 (it can on aarch64:
// +reserve-xN), and the segment base costs the access nothing (Segue,
// ASPLOS 2025). docs/security.md, "The window", has the measurement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace threechains::confined {

class Window {
 public:
  static constexpr uint64_t kSize = uint64_t{1} << 32;
  // On each side. x86-64: a signed 32-bit displacement reaches 2 GiB either
  // way. aarch64: a sign-extended 32-bit index scaled by 8 (`[xN, wM, sxtw
  // #3]`, which the aarch64 shape uses for an indexed access) reaches 16
  // GiB either way, plus 2 GiB for the displacements beyond it.
  static constexpr uint64_t kX86Guard = uint64_t{1} << 31;
  static constexpr uint64_t kAarch64Guard = uint64_t{18} << 30;
#if defined(__aarch64__)
  static constexpr uint64_t kGuard = kAarch64Guard;
#else
  static constexpr uint64_t kGuard = kX86Guard;
#endif
  // allocate() hands out [kLowGuard, kShared): the first pages stay
  // unmapped, so a null pointer and small offsets from it fault; the upper
  // half is for memory shared with the host and every window alike
  // (map_shared, confine/exposure.hpp).
  static constexpr uint64_t kLowGuard = uint64_t{1} << 16;
  static constexpr uint64_t kShared = kSize / 2;

  // Reserves the window and its guards (address space only: nothing is
  // committed until allocate()). Throws Error(errc::limit_exceeded) if the
  // process has not the address space left (8 GiB on x86-64, 40 on aarch64).
  Window();
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;
  Window(Window&& other) noexcept;
  Window& operator=(Window&& other) noexcept;

  [[nodiscard]] std::byte* base() const noexcept { return base_; }
  // Whether [address, address + bytes) lies inside the window.
  [[nodiscard]] bool contains(const void* address, std::size_t bytes) const noexcept;
  // Whether `address` lies in the window or its guards: where a fault is
  // the window's code reaching too far (confine/window_traps.hpp).
  [[nodiscard]] bool reaches(uintptr_t address) const noexcept {
    const auto begin = reinterpret_cast<uintptr_t>(reservation_);
    return reservation_ != nullptr && address >= begin && address - begin < reserved_;
  }
  // Bytes handed out so far (whole pages).
  [[nodiscard]] std::size_t used() const noexcept { return used_ == 0 ? 0 : used_ - kLowGuard; }

  // Not thread-safe: one owner hands out a window's pages (the
  // WindowMemoryMapper takes its own lock around it).
  // Maps `bytes` (rounded up to whole pages) of fresh, zeroed memory at the
  // next free offset: readable, and writable if `writable`. Throws
  // Error(errc::limit_exceeded) when the window has no room left.
  [[nodiscard]] std::span<std::byte> allocate(std::size_t bytes, bool writable);

  // Makes the whole pages of `pages` (something allocate() handed out)
  // inaccessible again and drops what they held. They are not handed out
  // again: 4 GiB of address space outlasts any code cache's turnover.
  void retire(std::span<std::byte> pages) noexcept;

  // Maps `bytes` of file `fd` from `file_offset` at `offset` in the shared
  // half ([kShared, kSize)), shared with every other mapping of it:
  // readable, and writable if `writable`. Throws Error(errc::limit_exceeded)
  // if the range is not in the shared half or the mapping fails.
  void map_shared(int fd, uint64_t file_offset, uint64_t offset, std::size_t bytes, bool writable);

 private:
  void release() noexcept;

  std::byte* reservation_ = nullptr;  // the guards and the window, owned
  std::size_t reserved_ = 0;
  std::byte* base_ = nullptr;  // reservation_ + kGuard
  std::size_t used_ = 0;       // the next offset allocate() hands out
};

// The system's page size (read once).
[[nodiscard]] std::size_t page_size() noexcept;

#if defined(__x86_64__)
// This thread's %gs base: what window-shaped code adds to every offset.
// Writing it costs 12-18 ns in a VM (measured, threechains-bench-window), so
// use() writes only when the base changes; reading our own copy costs
// nothing. Nothing else in a Linux x86-64 process uses %gs (the C library's
// thread pointer is %fs).
class GsBase {
 public:
  // Sets this thread's %gs base to `base` unless it is already there.
  static void use(const std::byte* base) noexcept {
    if (base != current_) [[unlikely]]
      write(base);
  }
  [[nodiscard]] static const std::byte* current() noexcept { return current_; }
  // If this thread's base is `base` (a window going away), points it at a
  // window that is never mapped, so that shaped code run by mistake faults
  // instead of reaching whatever is mapped there next. (Another thread's
  // base is its own: a window must outlive every thread that uses it.)
  static void forget(const std::byte* base) noexcept;

 private:
  static void write(const std::byte* base) noexcept;
  [[gnu::tls_model("initial-exec")]] static constinit thread_local const std::byte* current_;
};
#endif

}  // namespace threechains::confined
