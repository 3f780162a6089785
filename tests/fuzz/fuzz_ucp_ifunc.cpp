// libFuzzer target: ucp_poll_ifunc (<threechains/ucp_ifunc.h>) on a buffer a
// remote peer wrote. The first input byte picks the case: even, the rest of
// the input is a frame and the commit mark is made to match it (what a peer
// that speaks the protocol sends: the frame parser, the container parser and
// the trust rule see it); odd, the input lands as it is, mark included (the
// gate). The second byte shortens the buffer, so frames that do not fit it
// come too. Nothing is registered, so no code may run: every frame with code
// must be refused, and the target must keep polling.
#include "ucp_ifunc/wire.hpp"

#include <threechains/ucp_ifunc.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace wire = threechains::ucp_ifunc_wire;

namespace {

ucp_context_h make_context() {
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h context = nullptr;
  if (ucp_init(&params, nullptr, &context) != UCS_OK) std::abort();
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const ucp_context_h context = make_context();
  if (size < 2) return 0;
  const bool make_mark = (data[0] & 1) == 0;
  const std::size_t shorten = data[1];
  data += 2;
  size -= 2;
  // The buffer as a program would map it: 16-byte aligned.
  const std::size_t capacity = wire::kPayloadStart + size + 64;
  auto* buffer = static_cast<std::byte*>(std::aligned_alloc(16, (capacity + 15) / 16 * 16));
  std::memset(buffer, 0, capacity);
  if (make_mark) {
    std::memcpy(buffer + wire::kFrameStart, data, size);
    if (size >= sizeof(threechains::FrameHeader)) {
      const std::byte* header = buffer + wire::kFrameStart;
      const wire::CommitMark mark{
          wire::kMarkMagic,
          wire::frame_checksum(header, header + sizeof(threechains::FrameHeader),
                               size - sizeof(threechains::FrameHeader)),
          size};
      std::memcpy(buffer, &mark, sizeof(mark));
    }
  } else {
    std::memcpy(buffer, data, size);
  }
  const std::size_t buffer_size =
      shorten < capacity ? capacity - shorten : wire::kPayloadStart;
  uint64_t target_args = 0;
  const ucs_status_t status = ucp_poll_ifunc(context, buffer, buffer_size, &target_args, nullptr);
  // Nothing is registered and no key is trusted: nothing may have run.
  if (status == UCS_OK || target_args != 0) std::abort();
  std::free(buffer);
  return 0;
}
