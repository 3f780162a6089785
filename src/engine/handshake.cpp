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
#include "trust/sodium.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>

namespace threechains::detail {

namespace {

constexpr char kPeerDomain[] = "threechains-peer-v3";
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
constexpr char kTargetDomain[] = "threechains-target-v3";

template <std::size_t N>
void append(std::vector<std::byte>& out, const uint8_t (&bytes)[N]) {
  const auto* p = reinterpret_cast<const std::byte*>(bytes);
  out.insert(out.end(), p, p + N);
}

void append(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// What the source signs: domain, the target's nonce and key, its HELLO
// (which holds its own nonce and key) and the rkey sent with it, length
// first. The target's key binds the proof to the Receiver that asked:
// relayed to another Receiver, it does not verify.
std::vector<std::byte> peer_transcript(const Hello& hello, std::span<const std::byte> rkey,
                                       const uint8_t (&target_nonce)[kNonceSize],
                                       const uint8_t (&target_key)[kKeySize]) {
  std::vector<std::byte> out;
  append(out, std::as_bytes(std::span(kPeerDomain)));
  append(out, target_nonce);
  append(out, target_key);
  append(out, std::as_bytes(std::span(&hello, 1)));
  const uint64_t rkey_size = rkey.size();
  append(out, std::as_bytes(std::span(&rkey_size, 1)));
  append(out, rkey);
  return out;
}

// What the target signs when it proves itself: domain, both nonces, its key.
std::vector<std::byte> target_transcript(const uint8_t (&source_nonce)[kNonceSize],
                                         const uint8_t (&target_nonce)[kNonceSize],
                                         const uint8_t (&target_key)[kKeySize]) {
  std::vector<std::byte> out;
  append(out, std::as_bytes(std::span(kTargetDomain)));
  append(out, source_nonce);
  append(out, target_nonce);
  append(out, target_key);
  return out;
}

PublicKey key_of(const uint8_t (&bytes)[kKeySize]) {
  PublicKey::Bytes key{};
  std::memcpy(key.data(), bytes, kKeySize);
  return PublicKey(key);
}

std::string short_key(const PublicKey& key) {
  return key.hex().substr(0, 16) + "…";
}

std::span<const std::byte> reason_bytes(const std::string& reason) {
  return std::as_bytes(std::span(reason.data(), std::min(reason.size(), kMaxReasonSize)));
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

void Engine::answer_hello(Link& link) {
  const Hello hello = *link.in.hello;
  link.in.hello.reset();
  std::vector<std::byte> rkey = std::move(link.in.hello_rkey);
  link.in.hello_rkey.clear();
  if (link.refused) return;
  if (!target_) {
    send_welcome(link, UCS_ERR_UNREACHABLE, "this process runs no Receiver");
    return;
  }
  if (hello.version != kProtocolVersion) {
    refuse_peer(link, "it speaks protocol version " + std::to_string(hello.version) +
                          ", this Receiver speaks " + std::to_string(kProtocolVersion));
    return;
  }
  if (link.in.ring || link.in.pending) {
    refuse_peer(link, "a second HELLO on one connection");
    return;
  }
  const Trust& trust = target_->options.trust;
  if (trust.any_peer()) {
    grant_ring(link, hello, rkey);
    return;
  }
  if (trust.refuses_every_peer()) {
    refuse_peer(link,
                "this Receiver accepts no peers yet: give ReceiverOptions::trust the public keys "
                "of its sources (Trust().allow_peer(PublicKey::load(\"source.pub\"))), or use "
                "Trust::anyone() for development on a closed machine");
    return;
  }
  if ((hello.flags & kHelloHasKey) == 0) {
    refuse_peer(link, "it did not name a key: this Receiver accepts authenticated sources only "
                      "(ChannelOptions::identity)");
    return;
  }
  const PublicKey key = key_of(hello.key);
  if (!trust.accepts_peer(key)) {
    refuse_peer(link, "its key " + short_key(key) + " is not one this Receiver trusts");
    return;
  }
  Inbound::PendingHello pending{hello, std::move(rkey), {}};
  random_bytes(std::as_writable_bytes(std::span(pending.nonce)));
  Challenge challenge{};
  std::memcpy(challenge.nonce, pending.nonce.data(), kNonceSize);
  // Every Receiver has a key (its own, or one made when it started): the
  // proof names it, so it cannot be relayed to another Receiver.
  const KeyPair& identity = *target_->options.identity;
  std::memcpy(challenge.target_key, identity.public_key().bytes().data(), kKeySize);
  const KeyPair::Signature signature =
      identity.sign(target_transcript(hello.nonce, challenge.nonce, challenge.target_key));
  std::memcpy(challenge.target_signature, signature.data(), kSignatureSize);
  challenge.flags |= kChallengeSigned;
  link.in.pending = std::move(pending);
  try {
    outbox_.send(link.endpoint, kAmChallenge, challenge, {});
  } catch (const Error&) {  // the peer went away meanwhile: noticed as lost
  }
}

void Engine::check_proof(Link& link) {
  const Proof proof = *link.in.proof;
  link.in.proof.reset();
  if (link.refused || !target_) return;
  if (!link.in.pending) {
    refuse_peer(link, "a PROOF nobody asked for");
    return;
  }
  Inbound::PendingHello pending = std::move(*link.in.pending);
  link.in.pending.reset();
  uint8_t nonce[kNonceSize];
  std::memcpy(nonce, pending.nonce.data(), kNonceSize);
  const PublicKey key = key_of(pending.hello.key);
  uint8_t own_key[kKeySize];
  std::memcpy(own_key, target_->options.identity->public_key().bytes().data(), kKeySize);
  if (!verify_signature(key, peer_transcript(pending.hello, pending.rkey, nonce, own_key),
                        std::as_bytes(std::span(proof.signature)))) {
    refuse_peer(link, "its proof does not verify for key " + short_key(key));
    return;
  }
  grant_ring(link, pending.hello, pending.rkey);
}

void Engine::grant_ring(Link& link, const Hello& hello, std::span<const std::byte> credit_rkey) {
  Target& t = *target_;
  Inbound& in = link.in;
  const ReceiverLimits& limits = t.options.limits;
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
  link.in.pending.reset();
  if (target_) ++target_->stats.peers_refused;
  report(Error(errc::peer_refused, link.peer_name + " refused: " + reason));
  send_welcome(link, UCS_ERR_REJECTED, reason);
  // Its endpoint closes when the peer, having read the refusal, closes its
  // own, or after kRefusalLinger (expire_handshakes): closed at once, the
  // close may reach the peer first (over shared memory the refusal travels
  // on another lane) and it would see only a reset. The Link never had a ring.
  link.refused_at = std::chrono::steady_clock::now();
  if (link.receiving()) close_inbound(link, true);  // nothing more of it runs
  control_pending_ = true;
}

void Engine::expire_handshakes() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Link>> late;
  std::vector<std::shared_ptr<Link>> refused;
  std::vector<std::shared_ptr<Link>> lingering;
  for (const auto& [ep, link] : links_) {
    if (link->refused) {
      (now - link->refused_at > kRefusalLinger ? refused : lingering).push_back(link);
      continue;
    }
    if (!target_ || link->receiving() || link->sending() || link->out) continue;
    if (now - link->accepted_at > target_->options.limits.handshake_timeout) late.push_back(link);
  }
  // A flood of refused peers keeps at most kMaxLingering endpoints open: the
  // longest refused go at once.
  if (lingering.size() > kMaxLingering) {
    std::sort(lingering.begin(), lingering.end(),
              [](const auto& a, const auto& b) { return a->refused_at < b->refused_at; });
    refused.insert(refused.end(), lingering.begin(),
                   lingering.end() - static_cast<std::ptrdiff_t>(kMaxLingering));
  }
  for (const std::shared_ptr<Link>& link : refused) retire(link);
  for (const std::shared_ptr<Link>& link : late) {
    refuse_peer(*link, "it did not prove its key within " +
                           std::to_string(target_->options.limits.handshake_timeout.count()) +
                           " ms");
  }
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
