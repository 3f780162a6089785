// The prototypes' API: messages. A message keeps, in a 64-byte prefix, the
// mark and header of its cached form (no code), so a later send puts those
// and the payload, and nothing of the message is rewritten while an earlier
// put of it may still be reading. The buffer layout is in wire.hpp.
#include "jit/payload_abi.hpp"
#include "ucp_ifunc/context_state.hpp"
#include "ucp_ifunc/wire.hpp"

#include <threechains/ifunc.h>
#include <threechains/container.hpp>

#include <algorithm>
#include <cstring>
#include <new>

namespace tc = threechains;
using namespace tc::ucp_ifunc_detail;  // this room's own internals (context_state.hpp)

namespace {

using namespace tc::ucp_ifunc_wire;  // the buffer layout (wire.hpp)
constexpr std::size_t kPrefix = 64;  // cached mark + cached header + padding
static_assert(kPrefix % 16 == 0 && kPayloadStart % 16 == 0, "payloads stay 16-byte aligned");

}  // namespace

extern "C" {

ucs_status_t ucp_ifunc_msg_create(ucp_ifunc_h ifunc_h, void* source_args, size_t source_args_size,
                                  ucp_ifunc_msg_t* msg_p) {
  if (msg_p == nullptr) return UCS_ERR_INVALID_PARAM;
  // Whatever happens below, the message is one ucp_ifunc_msg_free takes:
  // the prototypes' programs free it even when the create failed, and
  // theirs is often an uninitialised local.
  *msg_p = ucp_ifunc_msg_t{};
  if (ifunc_h == nullptr) return UCS_ERR_INVALID_PARAM;
  if (ifunc_h->owner == nullptr || ifunc_h->registrations == 0) {
    return failed("msg_create: ifunc '" + ifunc_h->name + "' is not registered",
                  UCS_ERR_INVALID_PARAM);
  }
  // A library's payload functions make what they like of the source
  // arguments, NULL included (the prototypes' benchmarks pass NULL and a
  // size); only a plain copy needs them.
  if (source_args == nullptr && source_args_size != 0 && ifunc_h->payload_init == nullptr) {
    return failed("msg_create: ifunc '" + ifunc_h->name + "' has no " + ifunc_h->name +
                      "_payload_init, so its payload is a copy of the source arguments, and "
                      "they are NULL with a size of " +
                      std::to_string(source_args_size),
                  UCS_ERR_INVALID_PARAM);
  }
  const std::size_t max_payload = ifunc_h->payload_get_max_size != nullptr
                                      ? ifunc_h->payload_get_max_size(source_args, source_args_size)
                                      : source_args_size;
  const std::span<const std::byte> code = ifunc_h->ifunc.code();
  // A frame counts its parts in 32 bits (and the sums below cannot wrap).
  if (max_payload > UINT32_MAX || code.size() > UINT32_MAX) {
    return failed("msg_create: a payload of " + std::to_string(max_payload) + " bytes is over " +
                      "the 4 GiB a frame can carry",
                  UCS_ERR_EXCEEDS_LIMIT);
  }
  const std::size_t bytes = kPrefix + kPayloadStart + max_payload + code.size();
  auto* block = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{16}, std::nothrow));
  if (block == nullptr) return UCS_ERR_NO_MEMORY;
  std::memset(block, 0, kPrefix + kPayloadStart);
  std::byte* frame = block + kPrefix;
  std::byte* payload = frame + kPayloadStart;
  std::size_t payload_size = max_payload;
  if (ifunc_h->payload_init != nullptr) {
    int rc = 0;
    if (ifunc_h->order == tc::PayloadInitOrder::payload_first) {
      rc = reinterpret_cast<payload_first_init_fn>(ifunc_h->payload_init)(
          payload, max_payload, source_args, source_args_size);
    } else {
      rc = reinterpret_cast<threechains_payload_init_fn>(ifunc_h->payload_init)(
          source_args, source_args_size, payload, &payload_size);
    }
    if (rc != 0 || payload_size > max_payload) {
      ::operator delete (block, std::align_val_t{16});
      return failed("'" + ifunc_h->name + "_payload_init' failed", UCS_ERR_CANCELED);
    }
  } else if (source_args_size != 0) {
    // No payload_init: a copy of the source arguments, as much as fits.
    payload_size = std::min(source_args_size, max_payload);
    std::memcpy(payload, source_args, payload_size);
  }
  tc::FrameBuilder full(
      {frame + kFrameStart, sizeof(tc::FrameHeader) + payload_size + code.size()});
  if (full.begin(ifunc_h->ifunc.codec(), ifunc_h->ifunc.id(), 0, payload_size, code.size()) !=
      tc::errc::ok) {  // cannot happen after the checks above; never send a half-built frame
    ::operator delete (block, std::align_val_t{16});
    return UCS_ERR_EXCEEDS_LIMIT;
  }
  full.write_code(code);
  // The cached form's header: the same, without code.
  tc::FrameHeader header{};
  std::memcpy(&header, frame + kFrameStart, sizeof(header));
  header.code_size = 0;
  std::memcpy(block + sizeof(CommitMark), &header, sizeof(header));
  *msg_p = {ifunc_h, frame, kPayloadStart + payload_size + code.size()};
  ++ifunc_h->messages;
  return UCS_OK;
}

ucs_status_t ucp_ifunc_msg_get_payload_ptr(ucp_ifunc_msg_t* msg, void** payload,
                                           size_t* payload_size) {
  if (msg == nullptr || msg->frame == nullptr || payload == nullptr) return UCS_ERR_INVALID_PARAM;
  auto* frame = static_cast<std::byte*>(msg->frame);
  tc::FrameHeader header{};
  std::memcpy(&header, frame + kFrameStart, sizeof(header));
  *payload = frame + kPayloadStart;
  if (payload_size != nullptr) *payload_size = header.payload_size;
  return UCS_OK;
}

void ucp_ifunc_msg_free(ucp_ifunc_msg_t msg) {
  if (msg.frame == nullptr) return;
  ::operator delete (static_cast<std::byte*>(msg.frame) - kPrefix, std::align_val_t{16});
  if (ucp_ifunc* handle = msg.ifunc_h;
      handle != nullptr && --handle->messages == 0 && handle->owner == nullptr) {
    delete handle;  // deregistered while this message lived
  }
}

ucs_status_t ucp_ifunc_send_nbix(ucp_ep_h ep, ucp_ifunc_msg_t msg, uint64_t remote_addr,
                                 ucp_rkey_h rkey) {
  if (ep == nullptr || msg.ifunc_h == nullptr || msg.frame == nullptr) return UCS_ERR_INVALID_PARAM;
  auto* frame = static_cast<std::byte*>(msg.frame);
  std::byte* block = frame - kPrefix;
  std::byte* header = frame + kFrameStart;
  std::byte* payload = frame + kPayloadStart;
  tc::FrameHeader h{};
  std::memcpy(&h, header, sizeof(h));
  bool first = false;
  try {
    first = msg.ifunc_h->sent_to.insert(ep).second;
  } catch (const std::bad_alloc&) {
    return UCS_ERR_NO_MEMORY;
  }
  if (first) {
    // The whole frame, code included, in one put.
    const std::size_t body = h.payload_size + h.code_size;
    const CommitMark mark{kMarkMagic, frame_checksum(header, payload, body),
                          sizeof(tc::FrameHeader) + body};
    std::memcpy(frame, &mark, sizeof(mark));
    const ucs_status_t status = ucp_put_nbi(ep, frame, msg.frame_size, remote_addr, rkey);
    if (UCS_STATUS_IS_ERR(status)) msg.ifunc_h->sent_to.erase(ep);  // its code is still to go
    return status;
  }
  // Cached: the prefix's mark and header, then the payload; the code stays home.
  std::byte* cached_header = block + sizeof(CommitMark);
  const CommitMark mark{kMarkMagic, frame_checksum(cached_header, payload, h.payload_size),
                        sizeof(tc::FrameHeader) + h.payload_size};
  std::memcpy(block, &mark, sizeof(mark));
  ucs_status_t status = ucp_put_nbi(ep, block, kPayloadStart, remote_addr, rkey);
  if (UCS_STATUS_IS_ERR(status) || h.payload_size == 0) return status;
  const ucs_status_t second =
      ucp_put_nbi(ep, payload, h.payload_size, remote_addr + kPayloadStart, rkey);
  return UCS_STATUS_IS_ERR(second) || second == UCS_INPROGRESS ? second : status;
}

}  // extern "C"
