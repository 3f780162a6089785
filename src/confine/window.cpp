// What window.hpp says: the reservation, its alignment, pages mapped on
// demand, and the thread's %gs base.
#include "confine/window.hpp"

#include <threechains/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <asm/prctl.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#endif

namespace threechains::confined {

std::size_t page_size() noexcept {
  static const auto size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

Window::Window() {
  // Guard, window, guard, and one window's worth of slack to find a 4 GiB
  // boundary in; the slack is given back at once.
  const std::size_t span = kGuard + kSize + kGuard;
  const std::size_t asked = span + kSize;
  void* mapped =
      mmap(nullptr, asked, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapped == MAP_FAILED) {
    throw Error(errc::limit_exceeded, "cannot reserve a confinement window (" +
                                          std::to_string(asked >> 30) +
                                          " GiB of address space): " + std::strerror(errno));
  }
  auto* const start = static_cast<std::byte*>(mapped);
  const auto first = reinterpret_cast<uintptr_t>(start);
  const uintptr_t aligned = (first + kGuard + kSize - 1) & ~(kSize - 1);
  auto* const window = reinterpret_cast<std::byte*>(aligned);
  reservation_ = window - kGuard;
  reserved_ = span;
  base_ = window;
  used_ = kLowGuard;
  // The slack before and after: munmap of a part of a mapping cannot fail
  // for reasons of ours, and a failure would only leave address space held.
  if (reservation_ > start) (void)munmap(start, static_cast<std::size_t>(reservation_ - start));
  std::byte* const end = reservation_ + reserved_;
  if (start + asked > end) (void)munmap(end, static_cast<std::size_t>(start + asked - end));
}

Window::~Window() {
  release();
}

Window::Window(Window&& other) noexcept
    : reservation_(std::exchange(other.reservation_, nullptr)),
      reserved_(std::exchange(other.reserved_, 0)),
      base_(std::exchange(other.base_, nullptr)),
      used_(std::exchange(other.used_, 0)) {}

Window& Window::operator=(Window&& other) noexcept {
  if (this != &other) {
    release();
    reservation_ = std::exchange(other.reservation_, nullptr);
    reserved_ = std::exchange(other.reserved_, 0);
    base_ = std::exchange(other.base_, nullptr);
    used_ = std::exchange(other.used_, 0);
  }
  return *this;
}

void Window::release() noexcept {
#if defined(__x86_64__)
  if (base_ != nullptr) GsBase::forget(base_);
#endif
  if (reservation_ != nullptr) (void)munmap(reservation_, reserved_);
  reservation_ = nullptr;
  reserved_ = 0;
  base_ = nullptr;
  used_ = 0;
}

bool Window::contains(const void* address, std::size_t bytes) const noexcept {
  const auto at = reinterpret_cast<uintptr_t>(address);
  const auto begin = reinterpret_cast<uintptr_t>(base_);
  return base_ != nullptr && at >= begin && at - begin <= kSize && bytes <= kSize - (at - begin);
}

std::span<std::byte> Window::allocate(std::size_t bytes, bool writable) {
  const std::size_t page = page_size();
  const std::size_t rounded = bytes == 0 ? page : (bytes + page - 1) / page * page;
  if (base_ == nullptr || rounded < bytes || rounded > kShared - used_) {
    throw Error(errc::limit_exceeded, "a confinement window has " +
                                          std::to_string(base_ == nullptr ? 0 : kShared - used_) +
                                          " bytes left, not the " + std::to_string(bytes) +
                                          " asked for");
  }
  std::byte* const at = base_ + used_;
  // A fresh anonymous mapping over the reservation: zeroed by the kernel,
  // committed page by page as it is touched.
  const int protection = PROT_READ | (writable ? PROT_WRITE : 0);
  if (mmap(at, rounded, protection, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
           0) == MAP_FAILED) {
    throw Error(errc::limit_exceeded,
                "cannot map " + std::to_string(rounded) +
                    " bytes in a confinement window: " + std::strerror(errno));
  }
  used_ += rounded;
  return {at, bytes};
}

void Window::map_shared(int fd, uint64_t file_offset, uint64_t offset, std::size_t bytes,
                        bool writable) {
  if (base_ == nullptr || offset < kShared || offset > kSize || bytes > kSize - offset ||
      offset % page_size() != 0) {
    throw Error(errc::limit_exceeded, "cannot share " + std::to_string(bytes) +
                                          " bytes at offset " + std::to_string(offset) +
                                          " of a confinement window: not in its shared half");
  }
  const int protection = PROT_READ | (writable ? PROT_WRITE : 0);
  if (mmap(base_ + offset, bytes, protection, MAP_SHARED | MAP_FIXED, fd,
           static_cast<off_t>(file_offset)) == MAP_FAILED) {
    throw Error(errc::limit_exceeded,
                "cannot map " + std::to_string(bytes) +
                    " shared bytes into a confinement window: " + std::strerror(errno));
  }
}

void Window::retire(std::span<std::byte> pages) noexcept {
  const std::size_t page = page_size();
  const auto begin = reinterpret_cast<uintptr_t>(pages.data()) / page * page;
  const auto end =
      (reinterpret_cast<uintptr_t>(pages.data()) + pages.size() + page - 1) / page * page;
  if (!contains(reinterpret_cast<void*>(begin), end - begin)) return;
  // Over the old pages: a fresh reservation, as before allocate(). Cannot
  // fail for a range we reserved, short of the kernel running out of memory
  // for the mapping itself; then the pages stay as they were.
  (void)mmap(reinterpret_cast<void*>(begin), end - begin, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

#if defined(__x86_64__)

constinit thread_local const std::byte* GsBase::current_ = nullptr;

namespace {
// Linux lets user code write the base itself where the CPU has FSGSBASE and
// the kernel enabled it (5.9 on); arch_prctl, a system call, elsewhere.
bool has_fsgsbase() noexcept {
#ifndef HWCAP2_FSGSBASE
  constexpr unsigned long HWCAP2_FSGSBASE = 1UL << 1;  // NOLINT: the kernel's name
#endif
  static const bool has = (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE) != 0;
  return has;
}

[[gnu::target("fsgsbase")]] void write_gs_instruction(const std::byte* base) noexcept {
  __builtin_ia32_wrgsbase64(reinterpret_cast<uintptr_t>(base));
}
}  // namespace

void GsBase::write(const std::byte* base) noexcept {
  if (has_fsgsbase()) {
    write_gs_instruction(base);
  } else if (syscall(SYS_arch_prctl, ARCH_SET_GS, reinterpret_cast<uintptr_t>(base)) != 0) {
    // Shaped code run with another base than its window's reaches what
    // that base names: nothing may run on.
    std::abort();
  }
  current_ = base;
}

void GsBase::forget(const std::byte* base) noexcept {
  if (current_ != base) return;
  // Reserved once, never mapped, never given back.
  static const Window* const nowhere = new Window();
  write(nowhere->base());
}

#endif

}  // namespace threechains::confined
