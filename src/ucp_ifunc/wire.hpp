// The prototype-compatible API's buffer layout (<threechains/ucp_ifunc.h>):
//
//   | commit mark (24 B) | frame header (24 B) | payload | code (first send to an endpoint) |
//
// The mark holds a magic word, the frame's length and a hash over the frame as
// it must land; nothing runs until the hash matches. Shared by the library and
// its fuzzer (tests/fuzz/fuzz_ucp_ifunc.cpp).
#pragma once

#include <threechains/container.hpp>
#include <threechains/frame.hpp>

#include <cstddef>
#include <cstdint>

namespace threechains::ucp_ifunc_wire {

struct CommitMark {
  uint64_t magic;
  uint64_t checksum;     // frame_checksum() of the frame_bytes that follow
  uint64_t frame_bytes;  // header + payload + code
};
static_assert(sizeof(CommitMark) == 24);

inline constexpr uint64_t kMarkMagic = 0x636e7566692d4354;  // "TC-ifunc"
inline constexpr std::size_t kFrameStart = sizeof(CommitMark);
inline constexpr std::size_t kPayloadStart = kFrameStart + sizeof(FrameHeader);

// The header and the rest hashed apart, so a cached form (a header of its own
// followed by a message's payload) needs no contiguous copy to be marked.
[[nodiscard]] inline uint64_t frame_checksum(const std::byte* header, const std::byte* body,
                                             std::size_t body_bytes) noexcept {
  const uint64_t h = code_identity({header, sizeof(FrameHeader)});
  const uint64_t b = code_identity({body, body_bytes});
  return h ^ (b * 0x9E3779B97F4A7C15ULL);
}

}  // namespace threechains::ucp_ifunc_wire
