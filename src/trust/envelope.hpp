// Internal: the signature envelope in front of a signed container.
//
//   | "TCSIGN\x01\0" (8) | signer's Ed25519 public key (32) | signature (64) | container |
//
// The signature is over "threechains-code-v1\0" followed by the BLAKE2b-256
// hash of the container: every byte of the code, not its 64-bit identity
// (xxHash is fast, not collision-resistant).
#pragma once

#include <threechains/trust.hpp>

#include <cstddef>
#include <optional>
#include <span>

namespace threechains {

inline constexpr std::size_t kEnvelopeSize = 8 + PublicKey::size + KeyPair::signature_size;

struct Envelope {
  PublicKey signer;
  std::span<const std::byte> signature;
  std::span<const std::byte> body;
};

// The envelope of a signed container, nullopt if `container` is unsigned.
// Throws errc::code_refused if it starts like an envelope but is cut short.
[[nodiscard]] std::optional<Envelope> read_envelope(std::span<const std::byte> container);

// The container inside an envelope (or `container` itself if unsigned); no check.
[[nodiscard]] std::span<const std::byte> container_body(std::span<const std::byte> container);

// Whether `trust` lets code arriving as `container` run, and how: confined
// (a signer not fully trusted, or unsigned code) or as it is. Throws
// errc::code_refused saying why not (unsigned, tampered, untrusted signer).
[[nodiscard]] Confine check_code_trust(const Trust& trust, std::span<const std::byte> container);

// Whether code arriving as `container` would not run as it is here: its
// envelope names a signer `trust` does not trust with native code (or not
// at all), or it is unsigned and unsigned code runs confined here. Read,
// not verified: it says only where the check runs (beside the serving
// thread for such code), never whether the code is trusted.
[[nodiscard]] bool claims_untrusted_signer(const Trust& trust,
                                           std::span<const std::byte> container) noexcept;

}  // namespace threechains
