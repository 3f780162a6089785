// Signing containers and checking their signatures against a Trust.
#include "trust/envelope.hpp"
#include "trust/sodium.hpp"

#include <threechains/error.hpp>

#include <sodium.h>

#include <cstring>

namespace threechains {

namespace {

constexpr std::byte kMagic[8] = {std::byte{'T'}, std::byte{'C'}, std::byte{'S'},  std::byte{'I'},
                                 std::byte{'G'}, std::byte{'N'}, std::byte{0x01}, std::byte{0}};
constexpr char kDomain[] = "threechains-code-v1";  // sizeof includes the NUL: it separates

// What is signed: the domain string and the hash of the container.
std::array<std::byte, sizeof(kDomain) + crypto_generichash_BYTES> signed_message(
    std::span<const std::byte> body) {
  std::array<std::byte, sizeof(kDomain) + crypto_generichash_BYTES> message{};
  std::memcpy(message.data(), kDomain, sizeof(kDomain));
  crypto_generichash(reinterpret_cast<unsigned char*>(message.data() + sizeof(kDomain)),
                     crypto_generichash_BYTES, reinterpret_cast<const unsigned char*>(body.data()),
                     body.size(), nullptr, 0);
  return message;
}

}  // namespace

std::optional<Envelope> read_envelope(std::span<const std::byte> container) {
  if (container.size() < sizeof(kMagic) ||
      std::memcmp(container.data(), kMagic, sizeof(kMagic)) != 0) {
    return std::nullopt;
  }
  if (container.size() <= kEnvelopeSize) {
    throw Error(errc::code_refused, "signed container cut short (" +
                                        std::to_string(container.size()) + " bytes)");
  }
  PublicKey::Bytes key{};
  std::memcpy(key.data(), container.data() + sizeof(kMagic), key.size());
  return Envelope{PublicKey(key), container.subspan(sizeof(kMagic) + key.size(), KeyPair::signature_size),
                  container.subspan(kEnvelopeSize)};
}

std::span<const std::byte> container_body(std::span<const std::byte> container) {
  const std::optional<Envelope> envelope = read_envelope(container);
  return envelope ? envelope->body : container;
}

std::vector<std::byte> sign_container(std::span<const std::byte> container, const KeyPair& key) {
  ensure_sodium();
  const std::span<const std::byte> body = container_body(container);
  const KeyPair::Signature signature = key.sign(signed_message(body));
  std::vector<std::byte> out;
  out.reserve(kEnvelopeSize + body.size());
  out.insert(out.end(), std::begin(kMagic), std::end(kMagic));
  const PublicKey::Bytes& pk = key.public_key().bytes();
  out.insert(out.end(), pk.begin(), pk.end());
  out.insert(out.end(), signature.begin(), signature.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::optional<PublicKey> container_signer(std::span<const std::byte> container) {
  const std::optional<Envelope> envelope = read_envelope(container);
  if (!envelope) return std::nullopt;
  ensure_sodium();
  if (!verify_signature(envelope->signer, signed_message(envelope->body), envelope->signature)) {
    throw Error(errc::code_refused, "the container's signature does not verify (signer " +
                                        envelope->signer.hex().substr(0, 16) +
                                        "…): the code was changed after it was signed");
  }
  return envelope->signer;
}

Confine check_code_trust(const Trust& trust, std::span<const std::byte> container) {
  const std::optional<PublicKey> signer = container_signer(container);
  if (!signer) {
    if (trust.unsigned_code_allowed()) return trust.any_code() ? Confine::no : Confine::yes;
    throw Error(errc::code_refused,
                "the code is not signed, and this Receiver runs signed code only: sign it "
                "(threechains_add_ifunc(... SIGN_KEY <file>), threechains-key sign) with a key "
                "in ReceiverOptions::trust (Trust::allow_code_signer)");
  }
  if (!trust.accepts_code_signer(*signer)) {
    throw Error(errc::code_refused, "the code is signed by " + signer->hex().substr(0, 16) +
                                        "…, a key this Receiver does not trust "
                                        "(Trust::allow_code_signer)");
  }
  return trust.runs_native_code_of(*signer) ? Confine::no : Confine::yes;
}

bool claims_untrusted_signer(const Trust& trust, std::span<const std::byte> container) noexcept {
  try {
    const std::optional<Envelope> envelope = read_envelope(container);
    return envelope ? !trust.runs_native_code_of(envelope->signer)
                    : trust.unsigned_code_allowed() && !trust.any_code();
  } catch (...) {  // cut short: refused where it is checked, at once
    return false;
  }
}

}  // namespace threechains
