// Kept blocks for pre-linked images (image_memory.hpp).
#include "jit/image_memory.hpp"

#include <threechains/error.hpp>

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace threechains::jit {

std::byte* ImageMemory::acquire(std::size_t bytes) {
  if (const auto it = free_.find(bytes); it != free_.end() && !it->second.empty()) {
    std::byte* block = it->second.back();
    it->second.pop_back();
    kept_ -= bytes;
    std::memset(block, 0, bytes);  // what a fresh mapping holds: .bss and gaps read as zero
    return block;
  }
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) {
    throw Error(errc::jit_failed, "cannot map " + std::to_string(bytes) +
                                      " bytes for a pre-linked image: " + std::strerror(errno));
  }
  return static_cast<std::byte*>(mapped);
}

void ImageMemory::release(std::byte* block, std::size_t bytes) noexcept {
  if (block == nullptr) return;
  // Read-write again: no code of an evicted ifunc stays executable.
  if (kept_ + bytes > kKeptBytes || mprotect(block, bytes, PROT_READ | PROT_WRITE) != 0) {
    munmap(block, bytes);
    return;
  }
  try {
    free_[bytes].push_back(block);
    kept_ += bytes;
  } catch (...) {  // no memory for the list: give the block back instead
    munmap(block, bytes);
  }
}

ImageMemory::~ImageMemory() {
  for (auto& [bytes, blocks] : free_)
    for (std::byte* block : blocks) munmap(block, bytes);
}

}  // namespace threechains::jit
