// Link: everything an engine knows about one remote process, both directions
// over one UCX endpoint.
//
//   Outbound  — we send to it: the ring it granted us (RemoteBuffer), our
//               credit word (it writes what it consumed), our staging slots,
//               the requests in flight per slot, the code it holds, the code
//               we can resend, its pending cache-miss requests.
//   Inbound   — it sends to us: the ring we granted (MemoryRegion), its credit
//               word (RemoteBuffer), the next sequence we expect, what we last
//               credited back, a frame stalled on missing code, AM backlog.
//
// The engine owns every Link (shared_ptr, keyed by endpoint); a Channel holds
// the Link it sends on, so a Link outlives both its table entry and its
// handles. Nothing outside a Link points into it except the Channel's
// OutboundRing pointer, which that Channel keeps alive itself. When both
// directions are open (a Node pair), their credits ride on each other's
// frames here, inside the Link.
#pragma once

#include "engine/admission.hpp"
#include "engine/key_record.hpp"
#include "engine/protocol.hpp"

#include <threechains/channel.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/trust.hpp>
#include <threechains/ucx/endpoint.hpp>
#include <threechains/ucx/memory.hpp>
#include <threechains/ucx/request.hpp>

#include <array>
#include <chrono>
#include <set>
#include <string>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace threechains::detail {

struct Outbound {
  enum class State { connecting, open, refused, closed };

  explicit Outbound(MemoryRegion credit_region) : credit(std::move(credit_region)) {}

  State state = State::connecting;
  ucs_status_t refusal = UCS_OK;  // why the target refused, once refused
  std::string refusal_reason;     // the target's words, or ours (an unproven target)
  // The handshake: our nonce (the target signs it if asked to prove itself),
  // our key, the target's we insist on, a challenge to answer outside handlers.
  std::array<uint8_t, kNonceSize> nonce{};
  std::optional<KeyPair> identity;
  std::optional<PublicKey> target_key;
  std::optional<Challenge> challenge;
  bool target_proven = false;  // the target proved `target_key` (a WELCOME before it is refused)
  Hello hello{};               // as sent: the proof signs it
  std::vector<std::byte> hello_rkey;  // our credit word's rkey as sent (empty without RMA)
  MemoryRegion credit;         // the target writes its consumed count here
  // One staging slot per granted ring slot; only for puts and Active Messages
  // (direct delivery builds frames in the target's own slots).
  std::optional<MemoryRegion> staging;
  std::optional<RemoteBuffer> ring;  // the slots and, after them, the target's credit line
  bool credit_by_put = false;        // the target puts credits into `credit` (kWelcomeCreditByPut)
  OutboundRing hot;  // what Channel's inline send path reads
  Delivery delivery = Delivery::put;
  std::chrono::milliseconds timeout{30000};
  std::vector<Request> in_flight;    // per slot: body, commit (put) or the AM
  std::vector<uint64_t> am_headers;  // per slot: the credit piggybacked on its AM
  // Per slot: the pieces of a gathered send (UCX reads them until it is done).
  std::vector<std::array<ucp_dt_iov_t, 3>> am_pieces;
  // Why the channel cannot go on, or empty: a gathered send that had to be
  // cancelled left a hole in the sequence (errc::timeout); the target
  // reported more frames consumed than were sent, or disconnected us with a
  // reason (errc::protocol, errc::peer_refused).
  std::string broken;
  errc broken_as = errc::timeout;
  void break_with(errc as, std::string why) {
    if (!broken.empty()) return;  // the first cause is the one to tell
    broken = std::move(why);
    broken_as = as;
  }
  std::unordered_set<CodeId> held;   // code the target holds (or will, once it reads)
  // What we can resend on a cache miss, with the last sequence sent in cached
  // form; let go (beyond max_code_kept) only once the target consumed that.
  struct KeptCode {
    Ifunc ifunc;
    uint64_t last_sequence = 0;
  };
  std::unordered_map<CodeId, KeptCode> sent;
  std::size_t max_code_kept = 256;
  CodeId current_code = 0;  // the ifunc of the latest frames (its last_sequence is not final)
  std::vector<NeedCode> code_requests;  // cache misses to answer, outside handlers
  // Code the target refused to run (signature, imports, size): surfaced by the
  // Channel's next flush() or close(). Bounded; the rest only counted.
  struct CodeRefusal {
    errc error;
    std::string message;
  };
  std::vector<CodeRefusal> code_refusals;
  // Code went out since the last flush: a refusal of it may be on its way, so
  // flush() progresses once more after the credits (cached sends never pay).
  bool code_unconfirmed = false;
  uint64_t code_refusals_dropped = 0;
  uint64_t refusals_heard = 0;  // every CODE_REFUSED that reached us, kept or dropped

  // A credit by message (an AM of its own, or on a frame): the count of our
  // frames the target consumed. One that claims more than were sent breaks
  // the channel instead (taken, it would make the ring look full for good).
  void take_credit(uint64_t consumed) noexcept;
  // The same check for the count wherever it lands (the target's credit line
  // is read in place): false, and the channel broken, if it overran.
  bool credit_consistent() noexcept;

  // Credits land in our own word (by AM or put), not in the target's credit line.
  [[nodiscard]] bool credit_is_local() const noexcept {
    return hot.consumed_word == reinterpret_cast<const uint64_t*>(credit.data());
  }
};

struct Inbound {
  // The ring and the source's credit word stay with the Link until it is freed
  // (after its endpoint closed): a put or credit in flight may still touch them.
  bool open = false;
  std::optional<MemoryRegion> ring;    // the slots, then the credit line (protocol.hpp)
  std::optional<RemoteBuffer> credit;  // the source's credit word (credits by put)
  uint64_t* credit_line = nullptr;     // in `ring`: what we consumed, read in place by the source
  uint32_t slots = 0;
  std::size_t slot_size = 0;
  uint64_t expected = 1;      // sequence of the next frame to dispatch
  uint64_t reported = 0;      // last consumed count that reached (or is on its way to) the source
  uint64_t credit_value = 0;  // buffer of the credit in flight
  uint64_t consumed_at_last_look = 0;  // AM delivery: what return_credits() saw last time
  Request credit_request;
  uint64_t stalled_on = 0;         // sequence waiting for its code (cache miss), 0 if none
  CodeId stalled_code = 0;         // the code it waits for: only an answer about it settles it
  bool by_active_message = false;  // the source delivers frames by AM, not into the ring
  // Polling (idle.cpp): a ring stored into directly is polled while hot; one
  // with nothing for a cooling interval goes cold (its credit line says so,
  // and the source's next frame rings the doorbell, which makes it hot).
  bool cold = false;
  bool active = false;       // a frame ran since the last cooling pass
  bool credit_due = false;   // in the engine's credit_due_ list
  bool bye = false;                // the source said goodbye
  // AM delivery: frames that arrived while an earlier one waits for its code,
  // the waiting one first (slow path, copied).
  std::deque<std::vector<std::byte>> backlog;
  std::size_t ring_bytes = 0;        // what our ring for it counts against the limits
  bool fence_before_credit = false;  // a refusal went out: the credit must not overtake it
  uint64_t refusals_sent = 0;        // code refusals sent to this source (the credit line says)
  std::weak_ptr<const void> refusal_in_flight;  // that refusal, until its send completed
  struct CodeArrival {
    CodeDelivery header;
    std::vector<std::byte> code;
    std::size_t too_large = 0;  // the size of code refused unread (ReceiverLimits)
  };
  std::vector<CodeArrival> arrivals;  // code deliveries to load outside the handler
  // Code identities this peer sent the code of (and whose content matched):
  // the only ones its cached frames may name. Another peer's code under the
  // same 64-bit identity is not reachable from here.
  std::unordered_set<CodeId> shown;
  CodeId last_shown = 0;  // the one its frames named last: one compare per frame
  [[nodiscard]] bool has_shown(CodeId id) noexcept {
    if (id == last_shown && id != 0) return true;
    if (!shown.contains(id)) return false;
    last_shown = id;
    return true;
  }
  void forget_shown(CodeId id) noexcept {
    shown.erase(id);
    if (last_shown == id) last_shown = 0;
  }
};

struct Link {
  explicit Link(Endpoint ep) : endpoint(std::move(ep)) {}
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  [[nodiscard]] bool sending() const noexcept { return out && out->state == Outbound::State::open; }
  [[nodiscard]] bool receiving() const noexcept { return in.open; }

  Endpoint endpoint;
  std::string peer_name;  // host:port for a link we opened, "peer <ep>" for one we accepted
  int64_t rank = -1;      // the peer's rank in a Node mesh, -1 if none
  // A HELLO on a link we opened (a Node's peer opening its direction over our
  // connection). Accepted connections prove their keys in Admission first.
  Handshake handshake;
  bool refused = false;  // we refused it: it gets nothing more from us
  // When: its endpoint stays open a moment so the refusal, not a reset, is
  // what it sees (a close can overtake the refusal on another lane).
  std::chrono::steady_clock::time_point refused_at{};
  // Why this peer is to be disconnected, or empty: found on the hot path (it
  // sent more frames than its ring holds; its ring's state went inconsistent),
  // acted on by the next control round.
  std::string misbehaved;
  // The record of the key it proved (shared by that key's connections,
  // kept by the Target's KeyBook): what its confined code did, what is
  // refused to it. A key's traps ban code for that key only: replaying
  // another's code with bad payloads takes nothing from anyone else.
  std::shared_ptr<KeyRecord> key;
  uint64_t caller = 0;  // key->serial, at hand for each dispatch (JitCache::invoke)
  std::optional<Outbound> out;
  Inbound in;
  bool removed = false;  // no longer in the engine's table (peer gone or both sides done)
};

}  // namespace threechains::detail
