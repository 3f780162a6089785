// Internal: libsodium set-up and randomness for the trust layer.
#pragma once

#include <cstddef>
#include <span>

namespace threechains {

// sodium_init() once; throws if libsodium cannot start (no entropy source).
void ensure_sodium();
// Cryptographically random bytes (challenges).
void random_bytes(std::span<std::byte> out);

}  // namespace threechains
