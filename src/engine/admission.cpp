// Admission (admission.hpp): the listener's connections until they proved a
// key — the eviction policy, the target's side of the handshake, the room.
#include "engine/admission.hpp"

#include "engine/transcript.hpp"
#include "trust/sodium.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>

namespace threechains::detail {

namespace {

// The oldest of `proving` from `address`, if any.
std::optional<std::size_t> oldest_from(std::span<const ProvingPeer> proving,
                                       std::string_view address) {
  std::optional<std::size_t> oldest;
  for (std::size_t i = 0; i < proving.size(); ++i) {
    if (proving[i].address != address) continue;
    if (!oldest || proving[i].accepted_at < proving[*oldest].accepted_at) oldest = i;
  }
  return oldest;
}

}  // namespace

std::optional<std::size_t> choose_eviction(std::span<const ProvingPeer> proving,
                                           std::string_view newcomer, AdmissionLimits limits) {
  std::map<std::string_view, std::size_t> per_address;
  for (const ProvingPeer& peer : proving) ++per_address[peer.address];
  // The newcomer's address is at its cap: it gives way to itself.
  if (const auto own = per_address.find(newcomer);
      own != per_address.end() && own->second >= limits.max_pending_per_address)
    return oldest_from(proving, newcomer);
  if (proving.size() < limits.max_pending) return std::nullopt;
  // All full: the address with the most pending handshakes gives way (the
  // newcomer's counted with its newcomer; ties go to the one whose oldest is
  // oldest, so the eviction order stays first-come).
  std::string_view heaviest;
  std::size_t most = 0;
  std::optional<std::size_t> heaviest_oldest;
  for (const auto& [address, count] : per_address) {
    const std::size_t weight = count + (address == newcomer ? 1 : 0);
    const std::optional<std::size_t> oldest = oldest_from(proving, address);
    if (weight > most || (weight == most && proving[*oldest].accepted_at <
                                                proving[*heaviest_oldest].accepted_at)) {
      heaviest = address;
      most = weight;
      heaviest_oldest = oldest;
    }
  }
  return heaviest_oldest;
}

std::string host_of(const sockaddr_storage& address) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  const void* raw = nullptr;
  if (address.ss_family == AF_INET)
    raw = &reinterpret_cast<const sockaddr_in&>(address).sin_addr;
  else if (address.ss_family == AF_INET6)
    raw = &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
  if (raw == nullptr || inet_ntop(address.ss_family, raw, text.data(), text.size()) == nullptr)
    return "unknown";
  return text.data();
}

// ---- the target's side of the handshake ----------------------------------------

bool Handshake::take_hello(const void* header, std::size_t header_length, const void* data,
                           std::size_t length, bool rendezvous) {
  // Eager only (a rendezvous "data" is a descriptor, not bytes), one HELLO at
  // a time, an rkey of sane size: before authentication nothing else is kept.
  if (header_length != sizeof(Hello) || hello || length > kMaxRkeySize || rendezvous) return false;
  hello.emplace();
  std::memcpy(&*hello, header, sizeof(Hello));
  hello_rkey.assign(static_cast<const std::byte*>(data),
                    static_cast<const std::byte*>(data) + length);
  return true;
}

bool Handshake::take_proof(const void* header, std::size_t header_length) {
  if (header_length != sizeof(Proof) || !pending) return false;
  proof.emplace();
  std::memcpy(&*proof, header, sizeof(Proof));
  return true;
}

HandshakeStep answer_hello(Handshake& handshake, const Endpoint& endpoint,
                           const ReceiverOptions& options, Outbox& outbox, bool has_ring) {
  const Hello hello = *handshake.hello;
  handshake.hello.reset();
  std::vector<std::byte> rkey = std::move(handshake.hello_rkey);
  handshake.hello_rkey.clear();
  const auto refused = [](std::string reason) {
    return HandshakeStep{HandshakeStep::Kind::refused, std::move(reason), {}, {}};
  };
  if (hello.version != kProtocolVersion) {
    return refused("it speaks protocol version " + std::to_string(hello.version) +
                   ", this Receiver speaks " + std::to_string(kProtocolVersion));
  }
  if (has_ring || handshake.pending) return refused("a second HELLO on one connection");
  const Trust& trust = options.trust;
  if (trust.any_peer()) return {HandshakeStep::Kind::proven, {}, hello, std::move(rkey)};
  if (trust.refuses_every_peer()) {
    return refused(
        "this Receiver accepts no peers yet: give ReceiverOptions::trust the public keys "
        "of its sources (Trust().allow_peer(PublicKey::load(\"source.pub\"))), or use "
        "Trust::anyone() for development on a closed machine");
  }
  if ((hello.flags & kHelloHasKey) == 0) {
    return refused("it did not name a key: this Receiver accepts authenticated sources only "
                   "(ChannelOptions::identity)");
  }
  const PublicKey key = key_of(hello.key);
  if (!trust.accepts_peer(key))
    return refused("its key " + short_key(key) + " is not one this Receiver trusts");
  Handshake::Pending pending{hello, std::move(rkey), {}};
  random_bytes(std::as_writable_bytes(std::span(pending.nonce)));
  Challenge challenge{};
  std::memcpy(challenge.nonce, pending.nonce.data(), kNonceSize);
  // Every Receiver has a key (its own, or one made when it started): the
  // proof names it, so it cannot be relayed to another Receiver.
  const KeyPair& identity = *options.identity;
  std::memcpy(challenge.target_key, identity.public_key().bytes().data(), kKeySize);
  const KeyPair::Signature signature =
      identity.sign(target_transcript(hello.nonce, challenge.nonce, challenge.target_key));
  std::memcpy(challenge.target_signature, signature.data(), kSignatureSize);
  challenge.flags |= kChallengeSigned;
  handshake.pending = std::move(pending);
  try {
    outbox.send(endpoint, kAmChallenge, challenge, {});
  } catch (const Error&) {  // the peer went away meanwhile: noticed as lost
  }
  return {};
}

HandshakeStep check_proof(Handshake& handshake, const ReceiverOptions& options) {
  const Proof proof = *handshake.proof;
  handshake.proof.reset();
  if (!handshake.pending)
    return {HandshakeStep::Kind::refused, "a PROOF nobody asked for", {}, {}};
  Handshake::Pending pending = std::move(*handshake.pending);
  handshake.pending.reset();
  uint8_t nonce[kNonceSize];
  std::memcpy(nonce, pending.nonce.data(), kNonceSize);
  const PublicKey key = key_of(pending.hello.key);
  uint8_t own_key[kKeySize];
  std::memcpy(own_key, options.identity->public_key().bytes().data(), kKeySize);
  if (!verify_signature(key, peer_transcript(pending.hello, pending.rkey, nonce, own_key),
                        std::as_bytes(std::span(proof.signature)))) {
    return {HandshakeStep::Kind::refused, "its proof does not verify for key " + short_key(key),
            {}, {}};
  }
  return {HandshakeStep::Kind::proven, {}, pending.hello, std::move(pending.rkey)};
}

// ---- the room ------------------------------------------------------------------

Admission::~Admission() {
  close_all();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (!closing_.empty() && std::chrono::steady_clock::now() < deadline) {
    worker_.progress();
    reap_closing();
  }
  for (Closing& c : closing_) c.close.cancel(worker_);
}

void Admission::accept(std::span<const ucp_conn_request_h> requests, std::size_t peers,
                       const ReceiverOptions& options, ReceiverStats& stats, const Report& report) {
  const ReceiverLimits& limits = options.limits;
  reap_closing();
  for (ucp_conn_request_h request : requests) {
    ucp_conn_request_attr_t attributes{};
    attributes.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    std::string address = ucp_conn_request_query(request, &attributes) == UCS_OK
                              ? host_of(attributes.client_address)
                              : std::string("unknown");
    std::vector<ProvingPeer> proving;  // not refused: still proving their keys
    std::vector<Candidate*> proving_candidates;
    for (const auto& [ep, candidate] : candidates_) {
      if (candidate->refused) continue;
      proving.push_back({candidate->address, candidate->accepted_at});
      proving_candidates.push_back(candidate.get());
    }
    // Full: the new connection is closed, and nobody is evicted for it.
    const bool full = peers + proving.size() >= limits.max_peers;
    std::optional<Endpoint> endpoint;
    try {
      endpoint.emplace(Endpoint::accept(worker_, request));
    } catch (const Error& error) {  // the client went away before we accepted it
      report(error);
      continue;  // nobody evicted for a connection that is not there
    }
    if (full) {
      ++stats.peers_refused;
      report(Error(errc::limit_exceeded,
                   "a connection from " + address + " closed at once: " +
                       std::to_string(peers + proving.size()) +
                       " peers already (ReceiverLimits::max_peers)"));
      closing_.push_back({*endpoint, endpoint->start_force_close()});
      continue;
    }
    const std::optional<std::size_t> evict = choose_eviction(
        proving, address, {limits.max_pending_handshakes, limits.max_pending_per_address});
    if (evict) {
      // The evicted peer hears that it was too slow, not who came: another
      // client's address is no business of a peer that proved nothing.
      refuse(*proving_candidates[*evict],
             "it was still proving its key when newer connections came (" +
                 std::to_string(proving.size()) +
                 " proving; ReceiverLimits::max_pending_handshakes " +
                 std::to_string(limits.max_pending_handshakes) + ", max_pending_per_address " +
                 std::to_string(limits.max_pending_per_address) + ")",
             stats, report, " (evicted for a connection from " + address + ")");
    }
    auto candidate = std::make_unique<Candidate>(std::move(*endpoint));
    candidate->peer_name = "peer " + std::to_string(stats.peers_connected + 1);
    candidate->address = std::move(address);
    candidate->accepted_at = std::chrono::steady_clock::now();
    const ucp_ep_h handle = candidate->endpoint.handle();
    candidates_.emplace(handle, std::move(candidate));
    ++stats.peers_connected;
  }
}

Candidate* Admission::find(ucp_ep_h endpoint) const noexcept {
  const auto it = candidates_.find(endpoint);
  return it == candidates_.end() ? nullptr : it->second.get();
}

std::vector<Proven> Admission::step(const ReceiverOptions& options, ReceiverStats& stats,
                                    const Report& report) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<Proven> proven;
  std::vector<ucp_ep_h> leaving;  // refused long enough ago, gone, or said goodbye
  std::vector<Candidate*> lingering;
  // By key, looked up afresh: report() runs the application's on_error.
  std::vector<ucp_ep_h> keys;
  keys.reserve(candidates_.size());
  for (const auto& [ep, owned] : candidates_) keys.push_back(ep);
  for (ucp_ep_h ep : keys) {
    Candidate* found = find(ep);
    if (found == nullptr) continue;
    Candidate& candidate = *found;
    if (candidate.endpoint.failed() || candidate.bye) {
      leaving.push_back(ep);
      continue;
    }
    if (candidate.refused) {
      if (now - candidate.refused_at > kRefusalLinger) leaving.push_back(ep);
      else lingering.push_back(&candidate);
      continue;
    }
    HandshakeStep result;
    if (candidate.handshake.hello)
      result = answer_hello(candidate.handshake, candidate.endpoint, options, *outbox_, false);
    if (result.kind == HandshakeStep::Kind::waiting && candidate.handshake.proof)
      result = check_proof(candidate.handshake, options);
    if (result.kind == HandshakeStep::Kind::waiting &&
        now - candidate.accepted_at > options.limits.handshake_timeout) {
      result = {HandshakeStep::Kind::refused,
                "it did not prove its key within " +
                    std::to_string(options.limits.handshake_timeout.count()) + " ms",
                {},
                {}};
    }
    if (result.kind == HandshakeStep::Kind::refused) {
      refuse(candidate, result.reason, stats, report);
      lingering.push_back(&candidate);
    } else if (result.kind == HandshakeStep::Kind::proven) {
      proven.push_back({candidate.endpoint, candidate.peer_name, result.hello,
                        std::move(result.rkey)});
    }
  }
  // A flood of refused peers keeps at most kMaxLingering endpoints open: the
  // longest refused go at once.
  if (lingering.size() > kMaxLingering) {
    std::sort(lingering.begin(), lingering.end(),
              [](const Candidate* a, const Candidate* b) { return a->refused_at < b->refused_at; });
    for (std::size_t i = 0; i + kMaxLingering < lingering.size(); ++i)
      leaving.push_back(lingering[i]->endpoint.handle());
  }
  for (ucp_ep_h ep : leaving) close(ep);
  for (const Proven& p : proven) candidates_.erase(p.endpoint.handle());  // a Link now
  reap_closing();
  return proven;
}

void Admission::refuse(Candidate& candidate, const std::string& reason, ReceiverStats& stats,
                       const Report& report, const std::string& local_detail) {
  if (candidate.refused) return;
  candidate.refused = true;
  candidate.refused_at = std::chrono::steady_clock::now();
  candidate.handshake = {};
  ++stats.peers_refused;
  report(Error(errc::peer_refused, candidate.peer_name + " (" + candidate.address +
                                       ") refused: " + reason + local_detail));
  // Its endpoint closes when the peer, having read the refusal, closes its
  // own, or after kRefusalLinger: closed at once, the close may reach the
  // peer first (over shared memory the refusal travels on another lane) and
  // it would see only a reset.
  const Welcome welcome{kProtocolVersion, UCS_ERR_REJECTED, 0, 0, 0, 0};
  try {
    outbox_->send(candidate.endpoint, kAmWelcome, welcome, reason_bytes(reason));
  } catch (const Error&) {  // the peer went away meanwhile
  }
}

void Admission::close(ucp_ep_h endpoint) noexcept {
  const auto it = candidates_.find(endpoint);
  if (it == candidates_.end()) return;
  Endpoint closing = it->second->endpoint;
  candidates_.erase(it);
  try {
    closing_.push_back({closing, closing.start_force_close()});
  } catch (...) {  // no memory for the bookkeeping: the endpoint's last handle closes it
  }
}

void Admission::close_all() noexcept {
  std::vector<ucp_ep_h> all;
  try {
    all.reserve(candidates_.size());
    for (const auto& [ep, candidate] : candidates_) all.push_back(ep);
  } catch (...) {
  }
  for (ucp_ep_h ep : all) close(ep);
  candidates_.clear();
  reap_closing();
}

void Admission::reap_closing() noexcept {
  std::erase_if(closing_, [](Closing& c) { return c.close.reap() != UCS_INPROGRESS; });
}

}  // namespace threechains::detail
