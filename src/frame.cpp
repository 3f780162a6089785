// FrameView's words for a frame it refused: cold, so out of the header that
// every user of the library compiles.
#include <threechains/frame.hpp>

#include <algorithm>
#include <string>

namespace threechains {

namespace {

std::string hex(unsigned value) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), digits[value & 0xf]);
    value >>= 4;
  } while (value != 0);
  return s;
}

}  // namespace

std::string FrameView::describe(errc e, std::span<const std::byte> bytes) {
  FrameHeader h{};
  std::memcpy(&h, bytes.data(), std::min(bytes.size(), sizeof(h)));
  switch (e) {
    case errc::bad_magic:
      return "frame rejected: magic 0x" + hex(h.magic) + ", expected 0x" + hex(FrameHeader::kMagic);
    case errc::bad_version:
      return "frame rejected: version " + std::to_string(h.version) + ", this build speaks " +
             std::to_string(FrameHeader::kVersion);
    case errc::bad_codec:
      return "frame rejected: codec id " + std::to_string(h.codec) +
             " is not bitcode (1), binary (2) or tiered (3)";
    case errc::truncated_frame:
      if (bytes.size() < sizeof(FrameHeader)) {
        return "frame rejected: " + std::to_string(bytes.size()) + " bytes is shorter than the " +
               std::to_string(sizeof(FrameHeader)) + "-byte header";
      }
      return "frame rejected: header claims " + std::to_string(h.payload_size) + " B payload + " +
             std::to_string(h.code_size) + " B code, but only " +
             std::to_string(bytes.size() - sizeof(FrameHeader)) + " B follow the header";
    default:
      return std::string("frame rejected: ") + make_error_code(e).message();
  }
}

}  // namespace threechains
