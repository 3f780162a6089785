// Engine: the authenticated handshake.
//
//   source                                    target
//   HELLO {ring wishes, credit word, nonce_s, key}  ──▶  Trust: is `key` a peer?
//                  ◀──  CHALLENGE {nonce_t, target key, [target's signature]}
//   [checks the target, if it insists on a key]
//   PROOF {signature by `key` over the transcript} ──▶  verifies, then a ring:
//                  ◀──  WELCOME {ring, rkey}   or   WELCOME {refused, reason}
//
// The transcript binds both nonces, the source's key and its HELLO byte for
// byte (ring wishes, credit word, rank, and the rkey that follows it), so a
// proof cannot be replayed onto another connection or another request. Before
// the proof nothing a peer sent is used but to decide whether to challenge it:
// its rkey is unpacked (and only when credits go by put, on a context that does
// RMA) after the proof verified. A peer that fails gets no ring and
// no rkey, is counted and reported, and its endpoint is closed. A target
// whose Trust is anyone() grants at once (no extra round trip).
#include "engine/engine.hpp"
#include "engine/testing.hpp"
#include "engine/transcript.hpp"
#include "trust/sodium.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>

namespace threechains::detail {

namespace {

std::atomic<bool> forging_proofs{false};  // HandshakeAccess (tests only)

// HandshakeAccess::override_hello_credit (tests and fuzzers only).
struct HelloCreditOverride {
  std::optional<std::vector<std::byte>> rkey;
  int64_t address_shift = 0;
};
std::mutex hello_credit_mutex;
std::optional<HelloCreditOverride> hello_credit_forced;
std::atomic<bool> hello_credit_set{false};  // the hot check: no lock unless a test set one

std::optional<HelloCreditOverride> hello_credit_override() {
  if (!hello_credit_set.load(std::memory_order_acquire)) return std::nullopt;
  const std::lock_guard lock(hello_credit_mutex);
  return hello_credit_forced;
}

}  // namespace

// ---- source side ---------------------------------------------------------------

Hello Engine::make_hello(Outbound& out, const ChannelOptions& options, std::size_t slot_size,
                         int64_t my_rank) {
  Hello hello{};
  hello.version = kProtocolVersion;
  hello.slots = options.slots;
  hello.slot_size = slot_size;
  hello.credit_address = out.credit.address();
  hello.rank = my_rank;
  random_bytes(std::as_writable_bytes(std::span(out.nonce)));
  std::memcpy(hello.nonce, out.nonce.data(), kNonceSize);
  out.identity = options.identity;
  out.target_key = options.target_key;
  if (out.identity) {
    std::memcpy(hello.key, out.identity->public_key().bytes().data(), kKeySize);
    hello.flags |= kHelloHasKey;
  }
  // Our credit word's rkey goes along only if the target may put credits there.
  if (worker_.context().remote_memory_access()) {
    hello.flags |= kHelloCreditByPut;
    out.hello_rkey = out.credit.pack_rkey();
  }
  if (const std::optional<HelloCreditOverride> forced = hello_credit_override()) [[unlikely]] {
    hello.flags |= kHelloCreditByPut;
    hello.credit_address += forced->address_shift;
    out.hello_rkey = forced->rkey ? *forced->rkey : out.credit.pack_rkey();
  }
  out.hello = hello;
  return hello;
}

void Engine::answer_challenge(Link& link) {
  Outbound& out = *link.out;
  const Challenge challenge = *out.challenge;
  out.challenge.reset();
  if (out.state != Outbound::State::connecting) return;
  const auto refuse = [&](std::string reason) {
    out.refusal = UCS_ERR_REJECTED;
    out.refusal_reason = std::move(reason);
    out.state = Outbound::State::refused;
  };
  if (out.target_key) {
    uint8_t source_nonce[kNonceSize];
    std::memcpy(source_nonce, out.nonce.data(), kNonceSize);
    const bool proven =
        (challenge.flags & kChallengeSigned) != 0 &&
        key_of(challenge.target_key) == *out.target_key &&
        verify_signature(*out.target_key,
                         target_transcript(source_nonce, challenge.nonce, challenge.target_key),
                         std::as_bytes(std::span(challenge.target_signature)));
    if (!proven) {
      refuse("the Receiver did not prove it holds key " + short_key(*out.target_key) +
             " (ChannelOptions::target_key): not sending to it");
      return;
    }
    out.target_proven = true;
  }
  if (!out.identity) {
    refuse("the Receiver accepts authenticated sources only: set ChannelOptions::identity to a "
           "KeyPair whose public key its Trust allows");
    return;
  }
  const KeyPair::Signature signature =
      out.identity->sign(peer_transcript(out.hello, out.hello_rkey, challenge.nonce,
                                         challenge.target_key));
  Proof proof{};
  std::memcpy(proof.signature, signature.data(), kSignatureSize);
  if (forging_proofs.load(std::memory_order_relaxed)) [[unlikely]]
    proof.signature[0] ^= 1;
  try {
    outbox_.send(link.endpoint, kAmProof, proof, {});
  } catch (const Error& error) {
    refuse(std::string("sending the proof: ") + error.what());
  }
}

// ---- target side -----------------------------------------------------------------

// A HELLO (and PROOF) on a link we opened: a Node's peer opening its own
// direction over the connection we made. Connections we accepted prove their
// keys in Admission before they become Links.
void Engine::answer_handshake(Link& link) {
  if (link.refused) {
    link.handshake = {};
    return;
  }
  if (!target_) {
    if (link.handshake.hello) send_welcome(link, UCS_ERR_UNREACHABLE, "this process runs no Receiver");
    link.handshake = {};
    return;
  }
  HandshakeStep step;
  if (link.handshake.hello)
    step = answer_hello(link.handshake, link.endpoint, target_->options, outbox_,
                        link.in.ring.has_value());
  if (step.kind == HandshakeStep::Kind::waiting && link.handshake.proof)
    step = check_proof(link.handshake, target_->options);
  if (step.kind == HandshakeStep::Kind::refused) {
    refuse_peer(link, step.reason);
  } else if (step.kind == HandshakeStep::Kind::proven) {
    grant_ring(link, step.hello, step.rkey);
  }
}

void Engine::grant_ring(Link& link, const Hello& hello, std::span<const std::byte> credit_rkey) {
  Target& t = *target_;
  Inbound& in = link.in;
  const ReceiverLimits& limits = t.options.limits;
  // Its key's record: what it did before follows it onto this connection.
  link.key = t.keys.record_for(hello);
  link.caller = link.key->serial;
  if (const std::optional<std::string> why = key_refused(*link.key)) {
    refuse_peer(link, *why);
    return;
  }
  uint32_t slots = std::min(hello.slots, t.options.max_slots);
  const std::size_t slot_size =
      std::min<std::size_t>(hello.slot_size, t.options.max_slot_size) & ~(kSlotAlignment - 1);
  if (slot_size < kCommitWordSize + sizeof(FrameHeader) + 8 || slots == 0) {
    refuse_peer(link, "it asked for a ring of " + std::to_string(hello.slots) + " slots of " +
                          std::to_string(hello.slot_size) + " bytes");
    return;
  }
  // The per-peer budget shrinks the ring; the total budget refuses it.
  if (slot_size > limits.max_ring_bytes_per_peer) {
    refuse_peer(link, "one slot of " + std::to_string(slot_size) + " bytes is over the " +
                          std::to_string(limits.max_ring_bytes_per_peer) +
                          " bytes a peer may have (ReceiverLimits::max_ring_bytes_per_peer)");
    return;
  }
  slots = static_cast<uint32_t>(
      std::min<std::size_t>(slots, std::max<std::size_t>(limits.max_ring_bytes_per_peer / slot_size, 1)));
  const std::size_t bytes = std::size_t{slots} * slot_size;
  if (ring_bytes_granted_ + bytes > limits.max_ring_bytes) {
    refuse_peer(link, "its ring of " + std::to_string(bytes) + " bytes would exceed the " +
                          std::to_string(limits.max_ring_bytes) +
                          " bytes all peers may have (ReceiverLimits::max_ring_bytes)");
    return;
  }
  // Credits by put only where both sides do RMA (real lanes: RDMA, or a
  // closed machine that opted in); the peer's rkey is unpacked only then.
  const bool credit_by_put =
      (hello.flags & kHelloCreditByPut) != 0 && worker_.context().remote_memory_access();
  if (credit_by_put && (credit_rkey.empty() || hello.credit_address == 0)) {
    refuse_peer(link, "it asked for credits by put without a credit word to put them in");
    return;
  }
  Welcome welcome{kProtocolVersion, UCS_OK, 0, 0, 0, 0};
  std::vector<std::byte> rkey;
  try {
    link.rank = hello.rank;
    in.slots = slots;
    in.slot_size = slot_size;
    if (credit_by_put) {
      in.credit.emplace(link.endpoint, hello.credit_address, sizeof(uint64_t), credit_rkey);
      if (in.credit->outside_its_segment())
        throw Error(errc::protocol, "its credit word lies outside the memory its rkey maps");
      welcome.flags |= kWelcomeCreditByPut;
    }
    // One registration per peer: its rkey reaches this ring and nothing else.
    in.ring.emplace(worker_.context(), bytes + kCreditLineSize);
    in.credit_line = reinterpret_cast<uint64_t*>(in.ring->data() + bytes);
    std::fill_n(in.credit_line, kCreditLineSize / sizeof(uint64_t), uint64_t{0});
    rkey = in.ring->pack_rkey();
    welcome.slots = in.slots;
    welcome.slot_size = in.slot_size;
    welcome.ring_address = in.ring->address();
    in.ring_bytes = bytes;
    ring_bytes_granted_ += bytes;
    in.open = true;
    refresh_inbound();
  } catch (const Error& error) {
    in.ring.reset();
    in.credit_line = nullptr;
    in.credit.reset();
    // No ring: refused like any peer we cannot serve, and let go.
    refuse_peer(link, "no ring could be made for it: " + error.context());
    return;
  }
  try {
    outbox_.send(link.endpoint, kAmWelcome, welcome, rkey);
  } catch (const Error&) {  // the peer went away meanwhile: noticed as lost
  }
}

void Engine::send_welcome(Link& link, ucs_status_t status, const std::string& reason) {
  const Welcome welcome{kProtocolVersion, status, 0, 0, 0, 0};
  try {
    outbox_.send(link.endpoint, kAmWelcome, welcome, reason_bytes(reason));
  } catch (const Error&) {  // the peer went away meanwhile
  }
}

void Engine::refuse_peer(Link& link, const std::string& reason) {
  if (link.refused) return;
  link.refused = true;
  link.handshake = {};
  if (target_) ++target_->stats.peers_refused;
  report(Error(errc::peer_refused, link.peer_name + " refused: " + reason));
  send_welcome(link, UCS_ERR_REJECTED, reason);
  // Its endpoint closes when the peer, having read the refusal, closes its
  // own, or after kRefusalLinger (expire_refused): closed at once, the
  // close may reach the peer first (over shared memory the refusal travels
  // on another lane) and it would see only a reset. A link refused for what
  // it wrote into its ring loses the ring here.
  link.refused_at = std::chrono::steady_clock::now();
  if (link.receiving()) close_inbound(link, true);  // nothing more of it runs
  control_pending_ = true;
}

// Refused links (their rings taken away) close once the refusal had time to
// reach them. (Candidates that never proved a key are Admission's.)
void Engine::expire_refused() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Link>> refused;
  std::vector<std::shared_ptr<Link>> lingering;
  for (const auto& [ep, link] : links_) {
    if (!link->refused) continue;
    (now - link->refused_at > kRefusalLinger ? refused : lingering).push_back(link);
  }
  // Many refused at once keep at most kMaxLingering endpoints open: the
  // longest refused go at once.
  if (lingering.size() > kMaxLingering) {
    std::sort(lingering.begin(), lingering.end(),
              [](const auto& a, const auto& b) { return a->refused_at < b->refused_at; });
    refused.insert(refused.end(), lingering.begin(),
                   lingering.end() - static_cast<std::ptrdiff_t>(kMaxLingering));
  }
  for (const std::shared_ptr<Link>& link : refused) retire(link);
}

// ---- code refusals (target -> source) ----------------------------------------------

void Engine::send_code_refusal(Link& link, CodeId id, const Error& error) {
  const CodeRefused header{id, error.code().category() == threechains_category()
                                   ? error.code().value()
                                   : static_cast<int32_t>(errc::jit_failed),
                           0};
  const std::string text = error.context();
  try {
    link.in.refusal_in_flight =
        outbox_.send(link.endpoint, kAmCodeRefused, header, reason_bytes(text));
    ++link.in.refusals_sent;
    // A credit must not overtake the refusal: the source reads both after a
    // flush, and the refusal must be there when the credit is.
    link.in.fence_before_credit = true;
  } catch (const Error&) {  // the source went away
  }
}

}  // namespace threechains::detail

void threechains::HandshakeAccess::forge_proofs(bool forge) noexcept {
  detail::forging_proofs.store(forge, std::memory_order_relaxed);
}

void threechains::HandshakeAccess::override_hello_credit(
    std::optional<std::vector<std::byte>> rkey, int64_t address_shift) {
  const std::lock_guard lock(detail::hello_credit_mutex);
  detail::hello_credit_forced = detail::HelloCreditOverride{std::move(rkey), address_shift};
  detail::hello_credit_set.store(true, std::memory_order_release);
}

void threechains::HandshakeAccess::clear_hello_credit() noexcept {
  const std::lock_guard lock(detail::hello_credit_mutex);
  detail::hello_credit_forced.reset();
  detail::hello_credit_set.store(false, std::memory_order_release);
}
