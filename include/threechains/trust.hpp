// Trust: who may connect to a Receiver and whose code it runs.
//
// Keys are Ed25519 (libsodium, behind the compiled library). A Source proves
// it holds its secret key by signing a fresh challenge from the Receiver; a
// container carries a signature by a code-signing key over every byte of its
// code. A Receiver with no trust configured refuses every peer: configure the
// keys it accepts, or opt out with Trust::anyone() on a closed machine.
// docs/security.md has the threat model.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace threechains {

// An Ed25519 public key. Files hold one line: "threechains-ed25519-public <hex>".
class PublicKey {
 public:
  static constexpr std::size_t size = 32;
  using Bytes = std::array<std::byte, size>;

  PublicKey() = default;
  explicit PublicKey(const Bytes& bytes) noexcept : bytes_(bytes) {}
  // Throws errc::invalid_argument if `hex` is not 64 hex digits.
  [[nodiscard]] static PublicKey from_hex(std::string_view hex);
  // Throws errc::io (unreadable) or errc::invalid_argument (not a public key file).
  [[nodiscard]] static PublicKey load(const std::string& path);
  void save(const std::string& path) const;

  [[nodiscard]] std::string hex() const;
  [[nodiscard]] const Bytes& bytes() const noexcept { return bytes_; }
  bool operator==(const PublicKey&) const = default;

 private:
  Bytes bytes_{};
};

// An Ed25519 key pair. Cheap to copy (the secret is shared, immutable, and
// wiped from memory when the last copy goes). Files hold one line:
// "threechains-ed25519-secret <hex seed>", readable by the owner only.
class KeyPair {
 public:
  static constexpr std::size_t signature_size = 64;
  using Signature = std::array<std::byte, signature_size>;

  [[nodiscard]] static KeyPair generate();
  [[nodiscard]] static KeyPair load(const std::string& secret_path);
  // Writes the secret key (mode 0600) and, if given, the public key.
  void save(const std::string& secret_path, const std::string& public_path = {}) const;

  [[nodiscard]] const PublicKey& public_key() const noexcept;
  [[nodiscard]] Signature sign(std::span<const std::byte> message) const;

 private:
  struct Secret;
  explicit KeyPair(std::shared_ptr<const Secret> secret) noexcept : secret_(std::move(secret)) {}
  std::shared_ptr<const Secret> secret_;
};

[[nodiscard]] bool verify_signature(const PublicKey& key, std::span<const std::byte> message,
                                    std::span<const std::byte> signature) noexcept;

// How a target runs code, as its signer's trust decides: a key trusted with
// native code, or Trust::anyone(), runs as it is; other accepted code runs
// confined.
enum class Confine : uint8_t {
  no,   // as it is: code from a fully trusted signer (or Trust::anyone())
  yes,  // bitcode only, through the confinement pass; binary code is refused
};

// What a Receiver accepts. Default-constructed, it accepts nobody and no code.
class Trust {
 public:
  Trust() = default;

  // DEVELOPMENT ONLY, on a machine where every process is yours: any peer may
  // connect without proving who it is, and any code runs unconfined, signed or not (a
  // signature that does not verify is still refused: that code was tampered
  // with). Named so that a reviewer notices it.
  [[nodiscard]] static Trust anyone();

  // A Source holding this key's secret may connect.
  Trust& allow_peer(const PublicKey& key);
  // Code signed by this key may run, confined (confinement.hpp): bitcode
  // only, checked so that it touches only its payload, its own state and
  // what the target exposes, and stopped when it breaks a rule or runs too
  // long. See sign_container, threechains-key sign.
  Trust& allow_code_signer(const PublicKey& key);
  // Code signed by this key runs as it is, unconfined, machine code
  // included: it can do anything this process can. For keys held by whoever
  // runs the target itself.
  Trust& allow_native_code_signer(const PublicKey& key);
  // Unsigned code may run, confined (from authenticated peers only, unless anyone()).
  Trust& allow_unsigned_code() noexcept;

  [[nodiscard]] bool any_peer() const noexcept { return any_peer_; }
  [[nodiscard]] bool any_code() const noexcept { return any_code_; }
  [[nodiscard]] bool unsigned_code_allowed() const noexcept { return unsigned_code_; }
  [[nodiscard]] bool accepts_peer(const PublicKey& key) const noexcept;
  [[nodiscard]] bool accepts_code_signer(const PublicKey& key) const noexcept;
  // Whether code this key signed runs unconfined (anyone() runs all code so).
  [[nodiscard]] bool runs_native_code_of(const PublicKey& key) const noexcept;
  [[nodiscard]] bool refuses_every_peer() const noexcept { return !any_peer_ && peers_.empty(); }

 private:
  bool any_peer_ = false;
  bool any_code_ = false;
  bool unsigned_code_ = false;
  std::vector<PublicKey> peers_;
  std::vector<PublicKey> code_signers_;
  std::vector<PublicKey> native_signers_;
};

// Signs a packed container: the result is the container behind an envelope
// holding the signer's public key and an Ed25519 signature over a BLAKE2b hash
// of every byte of it. Signing a signed container re-signs what is inside.
[[nodiscard]] std::vector<std::byte> sign_container(std::span<const std::byte> container,
                                                    const KeyPair& key);

// The key that signed `container` if its signature is valid; nullopt if it is
// unsigned. Throws errc::code_refused if the envelope is malformed or the
// signature does not verify (tampered code).
[[nodiscard]] std::optional<PublicKey> container_signer(std::span<const std::byte> container);

}  // namespace threechains
