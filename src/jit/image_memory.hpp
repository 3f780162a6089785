// Memory for pre-linked images: page-aligned blocks, kept after an image is
// unloaded and handed to the next image of the same size. A fresh mapping
// costs the load its mmap, a page fault per page touched and, at unload, an
// munmap with its TLB shootdown: on a VM most of what a pre-linked load takes
// (threechains-bench-jit under perf). A kept block is made non-executable at
// once (its code must not run after its ifunc was evicted) and zeroed when
// reused.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

namespace threechains::jit {

class ImageMemory {
 public:
  ImageMemory() = default;
  ~ImageMemory();
  ImageMemory(const ImageMemory&) = delete;
  ImageMemory& operator=(const ImageMemory&) = delete;

  // `bytes` (a multiple of the page size) of zeroed, read-write memory.
  // Throws Error(jit_failed) if the system has none.
  [[nodiscard]] std::byte* acquire(std::size_t bytes);
  // Takes back a block acquire() gave, whatever its protection now.
  void release(std::byte* block, std::size_t bytes) noexcept;

 private:
  static constexpr std::size_t kKeptBytes = std::size_t{8} << 20;  // beyond this, unmapped
  std::map<std::size_t, std::vector<std::byte*>> free_;            // size -> blocks, read-write
  std::size_t kept_ = 0;
};

}  // namespace threechains::jit
