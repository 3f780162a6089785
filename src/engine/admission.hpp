// Admission: the room every byte from a peer that has not proved its key
// passes through. The listener's connection requests come here; each is
// accepted (never rejected: UCX 1.13's tcp sockcm aborts on an assertion when
// it rejects a request whose client already went) and becomes a Candidate,
// which may say one HELLO (and PROOF, if challenged) and nothing else. A
// Candidate that proves its key leaves as a `Proven`, and only then does the
// engine make a Link of it and grant it a ring; frames, code, credits and
// goodbyes from a Candidate reach no handler that looks at them (the engine's
// table holds no Candidate). One that fails, dawdles past the handshake
// deadline or is evicted is refused, lingers a moment so the refusal reaches
// it (kRefusalLinger), and is closed here. (OpenSSH's pre-authentication
// separation is the model; a process boundary is not, yet.)
//
// Two caps (ReceiverLimits) on those still proving: max_pending_per_address
// from one host (IP, any port) and max_pending_handshakes in all. Over the
// first, the newcomer's own host gives way (its oldest); over the second, the
// host holding the most pending handshakes does. So one host that floods the
// listener with half-open handshakes evicts its own, never a peer from
// elsewhere that is halfway through proving its key. choose_eviction() is
// that policy, pure (tests/test_limits.cpp checks it directly).
#pragma once

#include "engine/outbox.hpp"
#include "engine/protocol.hpp"

#include <threechains/receiver.hpp>
#include <threechains/ucx/endpoint.hpp>
#include <threechains/ucx/request.hpp>
#include <threechains/ucx/worker.hpp>

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace threechains::detail {

// ---- the eviction policy ----------------------------------------------------

struct ProvingPeer {
  std::string_view address;
  std::chrono::steady_clock::time_point accepted_at;
};

struct AdmissionLimits {
  uint32_t max_pending;              // ReceiverLimits::max_pending_handshakes
  uint32_t max_pending_per_address;  // ReceiverLimits::max_pending_per_address
};

// The index in `proving` of the connection to refuse so that one from
// `newcomer` can prove its key, or nothing if it fits as things are.
[[nodiscard]] std::optional<std::size_t> choose_eviction(std::span<const ProvingPeer> proving,
                                                         std::string_view newcomer,
                                                         AdmissionLimits limits);

// "192.0.2.7" or "2001:db8::1" (no port: the policy counts hosts), or
// "unknown" where UCX could not say.
[[nodiscard]] std::string host_of(const sockaddr_storage& address);

// ---- the target's side of the handshake ----------------------------------------

// What a peer said before it proved a key, kept from the handler to the
// control round: one HELLO with the rkey after it, one PROOF, and the HELLO
// we challenged with the nonce we sent.
struct Handshake {
  std::optional<Hello> hello;
  std::vector<std::byte> hello_rkey;
  struct Pending {
    Hello hello;
    std::vector<std::byte> rkey;
    std::array<uint8_t, kNonceSize> nonce;
  };
  std::optional<Pending> pending;
  std::optional<Proof> proof;

  // From the AM handlers: keep a HELLO (eager, one at a time, an rkey of
  // sane size) or a PROOF (only when one was asked for). False if dropped.
  bool take_hello(const void* header, std::size_t header_length, const void* data,
                  std::size_t length, bool rendezvous);
  bool take_proof(const void* header, std::size_t header_length);
};

// One step of a handshake: nothing to do yet (a CHALLENGE went out, or
// nothing came), the peer proved itself (what it asked for), or refused.
struct HandshakeStep {
  enum class Kind { waiting, proven, refused };
  Kind kind = Kind::waiting;
  std::string reason;           // refused: why
  Hello hello{};                // proven: the HELLO it proved
  std::vector<std::byte> rkey;  // proven: the rkey that came with it
};

// Answers a pending HELLO (a CHALLENGE, or a verdict at once: Trust says
// no, or anyone() grants) and checks a pending PROOF. `has_ring`: the
// connection already holds a ring (a second HELLO is refused).
[[nodiscard]] HandshakeStep answer_hello(Handshake& handshake, const Endpoint& endpoint,
                                         const ReceiverOptions& options, Outbox& outbox,
                                         bool has_ring);
[[nodiscard]] HandshakeStep check_proof(Handshake& handshake, const ReceiverOptions& options);

// ---- the room ------------------------------------------------------------------

// How long a refused peer's endpoint stays open for the refusal to reach it.
inline constexpr std::chrono::milliseconds kRefusalLinger{1000};
// How many refused peers may linger so at once (a flood of them goes sooner).
inline constexpr std::size_t kMaxLingering = 64;

// A connection the listener accepted that has not proved a key.
struct Candidate {
  explicit Candidate(Endpoint e) : endpoint(std::move(e)) {}
  Endpoint endpoint;
  std::string peer_name;  // "peer N" (N counts connections)
  std::string address;    // its host, as the listener saw it
  std::chrono::steady_clock::time_point accepted_at{};
  Handshake handshake;
  bool bye = false;  // it said goodbye before it proved anything: closed
  bool refused = false;
  std::chrono::steady_clock::time_point refused_at{};
};

// A candidate that proved its key, on its way to becoming a Link.
struct Proven {
  Endpoint endpoint;
  std::string peer_name;
  Hello hello;
  std::vector<std::byte> rkey;
};

class Admission {
 public:
  using Report = std::function<void(const Error&)>;

  // `outbox` (the engine's) carries CHALLENGEs and refusals; both it and
  // `worker` belong to the engine that owns this Admission and outlive it.
  Admission(const Worker& worker, Outbox& outbox) : worker_(worker), outbox_(&outbox) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  // Force-closes every candidate, waiting for UCX a bounded moment.
  ~Admission();

  // The listener's requests since the last round. `peers`: the proven peers
  // the engine holds (with candidates, at most max_peers; over it a
  // connection is closed at once, and nobody is evicted for it).
  void accept(std::span<const ucp_conn_request_h> requests, std::size_t peers,
              const ReceiverOptions& options, ReceiverStats& stats, const Report& report);

  // Handler side: the candidate behind an AM's reply endpoint, if any.
  [[nodiscard]] Candidate* find(ucp_ep_h endpoint) const noexcept;

  // The control round: answers HELLOs and PROOFs, refuses candidates past
  // the deadline, closes those refused long enough ago or gone. Returns the
  // candidates that proved their keys, which leave the room.
  [[nodiscard]] std::vector<Proven> step(const ReceiverOptions& options, ReceiverStats& stats,
                                         const Report& report);

  // Candidates wait for a deadline, or closing endpoints for UCX.
  [[nodiscard]] bool busy() const noexcept { return !candidates_.empty() || !closing_.empty(); }

  // Every candidate closed at once (the Receiver stops).
  void close_all() noexcept;

 private:
  // `reason` goes to the peer and the report; `local_detail` to the report only.
  void refuse(Candidate& candidate, const std::string& reason, ReceiverStats& stats,
              const Report& report, const std::string& local_detail = {});
  void close(ucp_ep_h endpoint) noexcept;  // out of the room, its endpoint force-closed
  void reap_closing() noexcept;

  const Worker& worker_;
  Outbox* outbox_;
  std::unordered_map<ucp_ep_h, std::unique_ptr<Candidate>> candidates_;
  struct Closing {
    Endpoint endpoint;
    Request close;
  };
  std::vector<Closing> closing_;
};

}  // namespace threechains::detail
