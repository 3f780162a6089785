// Internal: a container parsed into its images (compiled library only).
#pragma once

#include <threechains/container.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace threechains {

struct ParsedImage {
  std::string name;
  std::string triple;
  CodecId kind = CodecId::bitcode;
  std::vector<std::string> deps;
  std::vector<std::byte> bytes;
};

// Splits a container into images, checking every offset; throws errc::bad_container.
[[nodiscard]] std::vector<ParsedImage> parse_container(std::span<const std::byte> container);

// Containers from this size up are checked beside the thread that serves
// frames (the Engine's CodeVetting). Below it, hashing costs less than
// handing them over (a few microseconds). Confined containers of any size
// are prepared for their worker beside it (ConfinedPreparation).
inline constexpr std::size_t kLargeContainer = std::size_t{64} << 10;

// The codec a container's images make: their kind, or tiered if both kinds travel.
[[nodiscard]] CodecId codec_of(const std::vector<ParsedImage>& images);

}  // namespace threechains
