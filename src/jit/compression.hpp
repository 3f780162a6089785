// Internal: zstd for code sections. A container on the wire is either the raw
// concatenation of OffloadBinary images or one zstd frame of it (whichever is
// smaller, decided when packing); the zstd magic tells them apart.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace threechains {

[[nodiscard]] bool is_compressed(std::span<const std::byte> bytes) noexcept;
[[nodiscard]] std::vector<std::byte> compress(std::span<const std::byte> bytes);
// Throws errc::bad_container for a corrupt frame or one that would inflate past the limit.
[[nodiscard]] std::vector<std::byte> decompress(std::span<const std::byte> bytes);

}  // namespace threechains
