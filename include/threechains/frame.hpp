// Frame: the bytes one ifunc send puts into the target's memory.
//
//   | header (24 B) | payload (payload_size B) | code section (code_size B) |
//
// The code goes last, so the cached form of a frame (code_size == 0) is the
// same bytes, shorter. FrameBuilder lays a frame out in place (the payload is
// written straight into it); FrameView validates one that arrived.
#pragma once

#include <threechains/error.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

namespace threechains {

// How an ifunc's code travels. `tiered` carries, per triple, a relocatable
// object (linked at once: tier 0) and IR (compiled for the target's own CPU
// off the dispatch path, then switched to: tier 1); see JitOptions::tiering.
enum class CodecId : uint8_t { bitcode = 1, binary = 2, tiered = 3 };

[[nodiscard]] constexpr bool is_known_codec(uint8_t id) noexcept {
  return id >= static_cast<uint8_t>(CodecId::bitcode) &&
         id <= static_cast<uint8_t>(CodecId::tiered);
}

[[nodiscard]] constexpr const char* to_string(CodecId id) noexcept {
  switch (id) {
    case CodecId::bitcode:
      return "bitcode";
    case CodecId::binary:
      return "binary";
    case CodecId::tiered:
      return "tiered";
  }
  return "unknown";
}

// Content hash of a code section (xxHash3-64): new code under an old name is new code.
using CodeId = uint64_t;

struct FrameHeader {
  static constexpr uint16_t kMagic = 0x4354;  // "TC" little-endian
  static constexpr uint8_t kVersion = 1;

  uint16_t magic;
  uint8_t version;
  uint8_t codec;          // a CodecId
  uint32_t sequence;      // low 32 bits of the frame's sequence number on its channel
  uint32_t payload_size;  // bytes of payload after the header
  uint32_t code_size;     // bytes of code after the payload; 0 in a cached frame
  CodeId code_id;         // identity of the code, present in cached frames too

  // The header's first 8 bytes as one little-endian word: magic, version,
  // codec, sequence. The source stores it so, and a target compares a
  // frame's first word against it (Engine::run_next).
  [[nodiscard]] static constexpr uint64_t first_word(uint8_t codec, uint32_t sequence) noexcept {
    return uint64_t{kMagic} | uint64_t{kVersion} << 16 | uint64_t{codec} << 24 |
           uint64_t{sequence} << 32;
  }
};
static_assert(sizeof(FrameHeader) == 24, "the wire header is 24 bytes");
// first_word() and the stores and loads built on it assume this layout, on
// a little-endian host (as does the rest of the wire format's code).
static_assert(offsetof(FrameHeader, sequence) == 4 && offsetof(FrameHeader, payload_size) == 8 &&
              offsetof(FrameHeader, code_size) == 12 && offsetof(FrameHeader, code_id) == 16);
static_assert(std::endian::native == std::endian::little,
              "the frame header is read and written as little-endian words");
static_assert(std::is_trivially_copyable_v<FrameHeader>);

[[nodiscard]] constexpr std::size_t frame_size(std::size_t payload_size,
                                               std::size_t code_size) noexcept {
  return sizeof(FrameHeader) + payload_size + code_size;
}

// Lays out one frame in a caller-provided buffer, without copying the payload
// twice: write the header, then write the payload into payload(), then the code.
class FrameBuilder {
 public:
  explicit FrameBuilder(std::span<std::byte> buffer) noexcept : buffer_(buffer) {}

  // Writes the header; returns errc::frame_too_large if the frame does not fit.
  [[nodiscard]] errc begin(CodecId codec, CodeId code_id, uint32_t sequence,
                           std::size_t payload_size, std::size_t code_size) noexcept {
    if (frame_size(payload_size, code_size) > buffer_.size() || payload_size > UINT32_MAX ||
        code_size > UINT32_MAX) [[unlikely]] {
      return errc::frame_too_large;
    }
    // Three 8-byte stores from registers. A header built field by field on
    // the stack and copied as one block made the copy's 16-byte load wait
    // for the narrow stores before it (read as a store-forwarding stall:
    // half of a cached send's samples; docs/performance.md, "Past 2x").
    const uint64_t first = FrameHeader::first_word(static_cast<uint8_t>(codec), sequence);
    const uint64_t sizes = uint64_t{payload_size} | uint64_t{code_size} << 32;
    std::memcpy(buffer_.data(), &first, sizeof(first));
    std::memcpy(buffer_.data() + offsetof(FrameHeader, payload_size), &sizes, sizeof(sizes));
    std::memcpy(buffer_.data() + offsetof(FrameHeader, code_id), &code_id, sizeof(code_id));
    payload_size_ = payload_size;
    code_size_ = code_size;
    return errc::ok;
  }

  [[nodiscard]] std::byte* payload() const noexcept { return buffer_.data() + sizeof(FrameHeader); }
  [[nodiscard]] std::byte* code() const noexcept { return payload() + payload_size_; }
  [[nodiscard]] std::size_t size() const noexcept { return frame_size(payload_size_, code_size_); }

  void write_payload(std::span<const std::byte> bytes) const noexcept {
    if (!bytes.empty()) std::memcpy(payload(), bytes.data(), bytes.size());
  }
  void write_code(std::span<const std::byte> bytes) const noexcept {
    if (!bytes.empty()) std::memcpy(code(), bytes.data(), bytes.size());
  }

 private:
  std::span<std::byte> buffer_;
  std::size_t payload_size_ = 0;
  std::size_t code_size_ = 0;
};

// A validated, read-only view of a received frame.
class FrameView {
 public:
  // Checks magic, version, codec and that the sizes stay within `bytes`.
  // Returns errc::ok and fills `out`, or the first rule the frame breaks.
  [[nodiscard]] static errc parse(std::span<const std::byte> bytes, FrameView& out) noexcept {
    if (bytes.size() < sizeof(FrameHeader)) return errc::truncated_frame;
    FrameHeader header;
    std::memcpy(&header, bytes.data(), sizeof(header));
    if (header.magic != FrameHeader::kMagic) return errc::bad_magic;
    if (header.version != FrameHeader::kVersion) return errc::bad_version;
    if (!is_known_codec(header.codec)) return errc::bad_codec;
    if (frame_size(header.payload_size, header.code_size) > bytes.size())
      return errc::truncated_frame;
    out.header_ = header;
    out.bytes_ = bytes.first(frame_size(header.payload_size, header.code_size));
    return errc::ok;
  }

  // The same checks, throwing an Error whose message says exactly what is wrong.
  [[nodiscard]] static FrameView parse_or_throw(std::span<const std::byte> bytes) {
    FrameView view;
    if (const errc e = parse(bytes, view); e != errc::ok) throw Error(e, describe(e, bytes));
    return view;
  }

  // What is wrong with `bytes`, as parse() found `e`, in words (cold: in the
  // library).
  [[nodiscard]] static std::string describe(errc e, std::span<const std::byte> bytes);

  [[nodiscard]] const FrameHeader& header() const noexcept { return header_; }
  [[nodiscard]] CodecId codec() const noexcept { return static_cast<CodecId>(header_.codec); }
  [[nodiscard]] CodeId code_id() const noexcept { return header_.code_id; }
  [[nodiscard]] uint32_t sequence() const noexcept { return header_.sequence; }
  [[nodiscard]] bool has_code() const noexcept { return header_.code_size != 0; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_.size(); }

  [[nodiscard]] std::span<const std::byte> payload() const noexcept {
    return bytes_.subspan(sizeof(FrameHeader), header_.payload_size);
  }
  [[nodiscard]] std::span<const std::byte> code() const noexcept {
    return bytes_.subspan(sizeof(FrameHeader) + header_.payload_size, header_.code_size);
  }

 private:
  FrameHeader header_{};
  std::span<const std::byte> bytes_;
};

}  // namespace threechains
