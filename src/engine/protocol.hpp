// The connection protocol between a Source and a Receiver: Active Message ids
// and the fixed-size headers of the control messages. Every message is sent
// with UCP_AM_SEND_FLAG_REPLY (Endpoint::am_send) so the receiving side knows
// which endpoint, and so which Link, spoke.
#pragma once

#include <threechains/detail/outbound_ring.hpp>
#include <threechains/frame.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace threechains::detail {

// 2: authenticated handshake (HELLO, CHALLENGE, PROOF, WELCOME), code refusals.
// 3: the HELLO's rkey is signed too; credits by put only when both sides asked
//    UCX for RMA, otherwise stored into a line after the ring (read in place).
// 4: the credit line says when the target sleeps; a source that stores a
//    frame into the ring then rings its doorbell (kAmDoorbell).
inline constexpr uint32_t kProtocolVersion = 4;

// Source -> target
inline constexpr unsigned kAmHello = 0x7C01;  // open a channel: credit word rkey, ring wishes
inline constexpr unsigned kAmCode = 0x7C02;   // the code a target asked for (cache miss)
inline constexpr unsigned kAmBye = 0x7C03;    // the source is done; no frame is in flight
// A frame, when the channel delivers by AM. Header: none, or (both directions
// of a Link open) the sender's consumed count of the reverse direction.
inline constexpr unsigned kAmFrame = 0x7C04;
inline constexpr unsigned kAmProof = 0x7C05;  // the source's signature over the challenge
// No data: a frame was stored into the ring of a target whose credit line said
// it sleeps. The message itself wakes the target's event fd; the handler has
// nothing to do.
inline constexpr unsigned kAmDoorbell = 0x7C06;
// Target -> source
inline constexpr unsigned kAmWelcome = 0x7C11;   // the ring: address, rkey, geometry
inline constexpr unsigned kAmNeedCode = 0x7C12;  // a cached frame arrived for code not held
inline constexpr unsigned kAmCredit = 0x7C13;    // header: last consumed sequence (AM delivery)
inline constexpr unsigned kAmChallenge = 0x7C14;  // prove your key (and, maybe, ours is proven)
inline constexpr unsigned kAmCodeRefused = 0x7C15;  // code that will not run here; text follows

inline constexpr std::size_t kKeySize = 32;
inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kSignatureSize = 64;
inline constexpr std::size_t kMaxReasonSize = 512;  // refusal texts carried as AM data
inline constexpr std::size_t kMaxRkeySize = 4096;   // a packed rkey (HELLO data); UCX's are far smaller
inline constexpr std::size_t kMaxCodeArrivals = 8;  // CODE messages waiting for a control round, per link

struct Hello {
  uint32_t version;
  uint32_t slots;  // ring the source would like
  uint64_t slot_size;
  uint64_t credit_address;  // the source's credit word; packed rkey follows as AM data
  int64_t rank;             // the source's rank in a Node mesh, -1 outside one
  uint8_t nonce[kNonceSize];  // fresh: the target's proof (if asked for) signs it
  uint8_t key[kKeySize];      // the source's public key, if it has one (flags)
  uint32_t flags;             // kHelloHasKey, kHelloCreditByPut
  uint32_t reserved;
};
inline constexpr uint32_t kHelloHasKey = 1;
// The source's context does RMA: it may deliver by put, and then wants its
// credits put into its credit word (whose rkey follows the HELLO).
inline constexpr uint32_t kHelloCreditByPut = 2;

// Target -> source, when the target's Trust names its peers: sign this.
struct Challenge {
  uint8_t nonce[kNonceSize];
  uint8_t target_key[kKeySize];
  uint8_t target_signature[kSignatureSize];  // over the source's nonce, if flags say so
  uint32_t flags;                            // kChallengeSigned
  uint32_t reserved;
};
inline constexpr uint32_t kChallengeSigned = 1;

// Source -> target: the signature over the transcript (see engine/handshake.cpp).
struct Proof {
  uint8_t signature[kSignatureSize];
};

// Target -> source: the code (by identity) that was refused, and why (errc);
// the message follows as AM data.
struct CodeRefused {
  CodeId code_id;
  int32_t error;
  uint32_t reserved;
};

// A refusal carries its reason, as text, in the AM data.
// The ring is `slots * slot_size` bytes at `ring_address`, followed by one
// credit line whose first word is the last sequence the target consumed (a
// source that maps the ring reads it in place); the rkey covers both.
struct Welcome {
  uint32_t version;
  int32_t status;  // UCS_OK, or why the channel was refused
  uint32_t slots;  // the ring granted
  uint32_t flags;  // kWelcomeCreditByPut
  uint64_t slot_size;
  uint64_t ring_address;  // packed rkey follows as AM data
};
// The target also puts each credit into the source's credit word (both
// contexts do RMA); without it, Delivery::put is not available.
inline constexpr uint32_t kWelcomeCreditByPut = 1;
inline constexpr std::size_t kCreditLineSize = 64;
// The credit line's words: [0] the frames consumed (the credit), [1] the code
// refusals sent to that source so far, stored before the credit, so a source
// that reads its credits in place knows how many refusals are on their way.
inline constexpr std::size_t kCreditLineRefusals = 1;
// [2] nonzero while the target sleeps (a generation, new for each sleep): a
// source that stored a frame and reads a generation it has not rung for yet
// sends kAmDoorbell. The target only ever writes this word; a source that
// scribbles on it only wakes (or fails to wake) the target for itself.
inline constexpr std::size_t kCreditLineSleep = 2;
// [3] set by a source that stores into the ring when it says goodbye, before
// its kAmBye: over shared memory UCX may report its endpoint closed before it
// delivers the goodbye queued behind another message, and UCX drops messages
// from an endpoint it saw fail. The store travels with the frames. It decides
// only whether that source left or was lost.
inline constexpr std::size_t kCreditLineBye = 3;

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
              std::is_trivially_copyable_v<NeedCode> && std::is_trivially_copyable_v<CodeDelivery> &&
              std::is_trivially_copyable_v<Challenge> && std::is_trivially_copyable_v<Proof> &&
              std::is_trivially_copyable_v<CodeRefused>);
// Signed byte for byte: no padding may hide in what the transcript covers.
static_assert(sizeof(Hello) == 4 + 4 + 8 + 8 + 8 + kNonceSize + kKeySize + 4 + 4);

}  // namespace threechains::detail
