#include "jit/compression.hpp"

#include <threechains/error.hpp>

#include <zstd.h>

#include <cstring>
#include <string>

namespace threechains {
namespace {
// No ifunc's code needs more: a frame claiming more is malformed, not big.
constexpr unsigned long long kMaxInflated = 64ull << 20;
// Packing happens once, at build time: spend the effort there.
constexpr int kLevel = 19;
}  // namespace

bool is_compressed(std::span<const std::byte> bytes) noexcept {
  static constexpr unsigned char kMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) == 0;
}

std::vector<std::byte> compress(std::span<const std::byte> bytes) {
  std::vector<std::byte> out(ZSTD_compressBound(bytes.size()));
  const std::size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), kLevel);
  if (ZSTD_isError(n))
    throw Error(errc::bad_container, std::string("zstd: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

std::vector<std::byte> decompress(std::span<const std::byte> bytes) {
  const unsigned long long size = ZSTD_getFrameContentSize(bytes.data(), bytes.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) {
    throw Error(errc::bad_container, "code container: corrupt zstd frame");
  }
  if (size > kMaxInflated) {
    throw Error(errc::bad_container,
                "code container would inflate to " + std::to_string(size) + " bytes");
  }
  // One decompression context per thread, kept: ZSTD_decompress makes and
  // frees one per call (a ~100 KB allocation), which cost a third of a binary
  // ifunc's whole load (threechains-bench-jit, perf).
  struct Context {
    ZSTD_DCtx* handle = ZSTD_createDCtx();
    Context() = default;
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context() { ZSTD_freeDCtx(handle); }
  };
  thread_local const Context context;
  if (context.handle == nullptr) throw Error(errc::bad_container, "zstd: no decompression context");
  std::vector<std::byte> out(size);
  const std::size_t n =
      ZSTD_decompressDCtx(context.handle, out.data(), out.size(), bytes.data(), bytes.size());
  if (ZSTD_isError(n) || n != size) {
    throw Error(errc::bad_container, std::string("code container: zstd: ") +
                                         (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short frame"));
  }
  return out;
}

}  // namespace threechains
