// Internal: libsodium set-up and randomness for the trust layer.
#pragma once

#include <array>
#include <cstddef>
#include <span>

namespace threechains {

// sodium_init() once; throws if libsodium cannot start (no entropy source).
void ensure_sodium();
// Cryptographically random bytes (challenges).
void random_bytes(std::span<std::byte> out);
// BLAKE2b-256 of `bytes`: what code from the network is known by on a target
// (its 64-bit identity is a wire shorthand that a peer may choose to collide).
using ContentDigest = std::array<std::byte, 32>;
[[nodiscard]] ContentDigest content_digest(std::span<const std::byte> bytes);

}  // namespace threechains
