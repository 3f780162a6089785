// Frame layout and validation: no UCX, no LLVM, just bytes.
#include <threechains/frame.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <vector>

using namespace threechains;

namespace {

std::vector<std::byte> build(std::size_t payload, std::size_t code, uint32_t sequence = 7) {
  std::vector<std::byte> buffer(frame_size(payload, code));
  FrameBuilder builder(buffer);
  REQUIRE(builder.begin(CodecId::bitcode, 0x1122334455667788ULL, sequence, payload, code) ==
          errc::ok);
  for (std::size_t i = 0; i < payload; ++i) builder.payload()[i] = std::byte(i & 0xff);
  for (std::size_t i = 0; i < code; ++i) builder.code()[i] = std::byte(0xc0 ^ (i & 0xff));
  REQUIRE(builder.size() == buffer.size());
  return buffer;
}

}  // namespace

TEST_CASE("frame header is 24 bytes and the payload follows it", "[frame]") {
  STATIC_REQUIRE(sizeof(FrameHeader) == 24);
  const auto bytes = build(5, 3);
  FrameView view;
  REQUIRE(FrameView::parse(bytes, view) == errc::ok);
  CHECK(view.codec() == CodecId::bitcode);
  CHECK(view.code_id() == 0x1122334455667788ULL);
  CHECK(view.sequence() == 7);
  CHECK(view.payload().size() == 5);
  CHECK(view.payload().data() == bytes.data() + 24);
  CHECK(view.code().data() == bytes.data() + 24 + 5);
  CHECK(view.has_code());
  CHECK(std::to_integer<int>(view.payload()[4]) == 4);
  CHECK(std::to_integer<int>(view.code()[2]) == (0xc0 ^ 2));
}

TEST_CASE("a cached frame is the full frame's bytes, shorter", "[frame]") {
  const auto full = build(16, 100);
  const auto cached = build(16, 0);
  REQUIRE(cached.size() == full.size() - 100);
  // Same bytes apart from the code size field.
  CHECK(std::memcmp(full.data(), cached.data(), offsetof(FrameHeader, code_size)) == 0);
  CHECK(std::memcmp(full.data() + offsetof(FrameHeader, code_id),
                    cached.data() + offsetof(FrameHeader, code_id),
                    cached.size() - offsetof(FrameHeader, code_id)) == 0);
  FrameView view;
  REQUIRE(FrameView::parse(cached, view) == errc::ok);
  CHECK_FALSE(view.has_code());
  CHECK(cached.size() == 40);  // 24-byte header + 16-byte payload
}

TEST_CASE("a cached frame of a 1-byte payload is at most 32 bytes", "[frame]") {
  CHECK(frame_size(1, 0) <= 32);
}

TEST_CASE("FrameBuilder refuses a frame larger than its buffer", "[frame]") {
  std::array<std::byte, 64> buffer{};
  FrameBuilder builder(buffer);
  CHECK(builder.begin(CodecId::binary, 1, 1, 41, 0) == errc::frame_too_large);
  CHECK(builder.begin(CodecId::binary, 1, 1, 40, 0) == errc::ok);
}

TEST_CASE("FrameView rejects malformed frames and says why", "[frame]") {
  auto bytes = build(8, 8);
  FrameView view;

  SECTION("shorter than a header") {
    const std::span<const std::byte> cut(bytes.data(), 10);
    CHECK(FrameView::parse(cut, view) == errc::truncated_frame);
    CHECK_THROWS_WITH(FrameView::parse_or_throw(cut),
                      Catch::Contains("shorter than the 24-byte header"));
  }
  SECTION("bad magic") {
    bytes[0] = std::byte{0xff};
    CHECK(FrameView::parse(bytes, view) == errc::bad_magic);
    CHECK_THROWS_WITH(FrameView::parse_or_throw(bytes), Catch::Contains("magic"));
  }
  SECTION("unknown version") {
    bytes[2] = std::byte{9};
    CHECK(FrameView::parse(bytes, view) == errc::bad_version);
    CHECK_THROWS_WITH(FrameView::parse_or_throw(bytes), Catch::Contains("version 9"));
  }
  SECTION("unknown codec") {
    bytes[3] = std::byte{42};
    CHECK(FrameView::parse(bytes, view) == errc::bad_codec);
    CHECK_THROWS_WITH(FrameView::parse_or_throw(bytes), Catch::Contains("codec id 42"));
  }
  SECTION("sizes beyond the bytes that arrived") {
    const std::span<const std::byte> cut(bytes.data(), bytes.size() - 1);
    CHECK(FrameView::parse(cut, view) == errc::truncated_frame);
    CHECK_THROWS_WITH(FrameView::parse_or_throw(cut), Catch::Contains("8 B payload + 8 B code"));
  }
  SECTION("an absurd payload size does not overflow the bounds check") {
    const uint32_t huge = 0xffffffffu;
    std::memcpy(bytes.data() + offsetof(FrameHeader, payload_size), &huge, sizeof(huge));
    std::memcpy(bytes.data() + offsetof(FrameHeader, code_size), &huge, sizeof(huge));
    CHECK(FrameView::parse(bytes, view) == errc::truncated_frame);
  }
}

TEST_CASE("errors carry their category and code", "[frame][error]") {
  const Error e(errc::bad_magic, "x");
  CHECK(e.is(errc::bad_magic));
  CHECK(e.code().category().name() == std::string("threechains"));
  const Error u(UCS_ERR_UNREACHABLE, "y");
  CHECK(u.ucs_status() == UCS_ERR_UNREACHABLE);
  CHECK_FALSE(e.ucs_status().has_value());
  CHECK(u.code().category().name() == std::string("ucs"));
}

TEST_CASE("an error says its status once", "[frame][error]") {
  try {
    check(UCS_ERR_NO_MEMORY, "ucp_init");
    FAIL("check() did not throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "ucp_init: Out of memory");
  }
  CHECK_NOTHROW(check(UCS_INPROGRESS, "in progress is not an error"));
}
