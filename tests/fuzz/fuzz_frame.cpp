// libFuzzer target: frame validation (FrameView::parse and the error text a
// Receiver reports), the first thing every byte that lands in a ring meets.
#include <threechains/frame.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  threechains::FrameView view;
  const threechains::errc e = threechains::FrameView::parse(bytes, view);
  if (e != threechains::errc::ok) {
    (void)threechains::FrameView::describe(e, bytes);
    return 0;
  }
  // A valid frame's parts lie inside the bytes: touch their ends.
  volatile std::byte sink{};
  if (!view.payload().empty()) sink = view.payload().back();
  if (view.has_code()) sink = view.code().back();
  (void)sink;
  return 0;
}
