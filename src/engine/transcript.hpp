// What each side of the handshake signs (handshake.cpp: the source's side;
// admission.cpp: the target's), and the small helpers both sides use.
//
// The peer's transcript binds both nonces, the target's key, the source's
// HELLO byte for byte and the rkey sent with it (length first): a proof is
// good for one connection, one ring request and one Receiver.
#pragma once

#include "engine/protocol.hpp"

#include <threechains/trust.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace threechains::detail {

inline constexpr char kPeerDomain[] = "threechains-peer-v3";
inline constexpr char kTargetDomain[] = "threechains-target-v3";

template <std::size_t N>
void append_bytes(std::vector<std::byte>& out, const uint8_t (&bytes)[N]) {
  const auto* p = reinterpret_cast<const std::byte*>(bytes);
  out.insert(out.end(), p, p + N);
}

inline void append_bytes(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// What the source signs: domain, the target's nonce and key, its HELLO
// (which holds its own nonce and key) and the rkey sent with it, length
// first. The target's key binds the proof to the Receiver that asked:
// relayed to another Receiver, it does not verify.
inline std::vector<std::byte> peer_transcript(const Hello& hello, std::span<const std::byte> rkey,
                                              const uint8_t (&target_nonce)[kNonceSize],
                                              const uint8_t (&target_key)[kKeySize]) {
  std::vector<std::byte> out;
  append_bytes(out, std::as_bytes(std::span(kPeerDomain)));
  append_bytes(out, target_nonce);
  append_bytes(out, target_key);
  append_bytes(out, std::as_bytes(std::span(&hello, 1)));
  const uint64_t rkey_size = rkey.size();
  append_bytes(out, std::as_bytes(std::span(&rkey_size, 1)));
  append_bytes(out, rkey);
  return out;
}

// What the target signs when it proves itself: domain, both nonces, its key.
inline std::vector<std::byte> target_transcript(const uint8_t (&source_nonce)[kNonceSize],
                                                const uint8_t (&target_nonce)[kNonceSize],
                                                const uint8_t (&target_key)[kKeySize]) {
  std::vector<std::byte> out;
  append_bytes(out, std::as_bytes(std::span(kTargetDomain)));
  append_bytes(out, source_nonce);
  append_bytes(out, target_nonce);
  append_bytes(out, target_key);
  return out;
}

inline PublicKey key_of(const uint8_t (&bytes)[kKeySize]) {
  PublicKey::Bytes key{};
  std::memcpy(key.data(), bytes, kKeySize);
  return PublicKey(key);
}

inline std::string short_key(const PublicKey& key) {
  return key.hex().substr(0, 16) + "…";
}

// A refusal's text as it travels (bounded).
inline std::span<const std::byte> reason_bytes(const std::string& reason) {
  return std::as_bytes(std::span(reason.data(), std::min(reason.size(), kMaxReasonSize)));
}

}  // namespace threechains::detail
