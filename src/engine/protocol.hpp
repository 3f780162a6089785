// The connection protocol between a Source and a Receiver: Active Message ids
// and the fixed-size headers of the control messages. Every message is sent
// with UCP_AM_SEND_FLAG_REPLY (Endpoint::am_send) so the receiving side knows
// which endpoint, and so which Link, spoke.
#pragma once

#include <threechains/detail/outbound_ring.hpp>
#include <threechains/frame.hpp>

#include <cstdint>
#include <type_traits>

namespace threechains::detail {

inline constexpr uint32_t kProtocolVersion = 1;

// Source -> target
inline constexpr unsigned kAmHello = 0x7C01;  // open a channel: credit word rkey, ring wishes
inline constexpr unsigned kAmCode = 0x7C02;   // the code a target asked for (cache miss)
inline constexpr unsigned kAmBye = 0x7C03;    // the source is done; no frame is in flight
// A frame, when the channel delivers by AM. Header: none, or (both directions
// of a Link open) the sender's consumed count of the reverse direction.
inline constexpr unsigned kAmFrame = 0x7C04;
// Target -> source
inline constexpr unsigned kAmWelcome = 0x7C11;   // the ring: address, rkey, geometry
inline constexpr unsigned kAmNeedCode = 0x7C12;  // a cached frame arrived for code not held
inline constexpr unsigned kAmCredit = 0x7C13;    // header: last consumed sequence (AM delivery)

struct Hello {
  uint32_t version;
  uint32_t slots;  // ring the source would like
  uint64_t slot_size;
  uint64_t credit_address;  // the source's credit word; packed rkey follows as AM data
  int64_t rank;             // the source's rank in a Node mesh, -1 outside one
};

struct Welcome {
  uint32_t version;
  int32_t status;  // UCS_OK, or why the channel was refused
  uint32_t slots;  // the ring granted
  uint32_t reserved;
  uint64_t slot_size;
  uint64_t ring_address;  // packed rkey follows as AM data
};

struct NeedCode {
  uint64_t sequence;
  CodeId code_id;
};

struct CodeDelivery {
  CodeId code_id;
  uint8_t codec;
  uint8_t found;  // 0: the source does not hold this code; the frame is dropped
  uint8_t reserved[6];
};

static_assert(std::is_trivially_copyable_v<Hello> && std::is_trivially_copyable_v<Welcome> &&
              std::is_trivially_copyable_v<NeedCode> && std::is_trivially_copyable_v<CodeDelivery>);

}  // namespace threechains::detail
