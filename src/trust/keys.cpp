// Ed25519 keys through libsodium: generation, files, signing, verification.
#include "trust/sodium.hpp"
#include "write_exactly.hpp"

#include <threechains/error.hpp>
#include <threechains/trust.hpp>

#include <sodium.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace threechains {

namespace {

constexpr std::string_view kPublicTag = "threechains-ed25519-public";
constexpr std::string_view kSecretTag = "threechains-ed25519-secret";

template <std::size_t N>
std::array<std::byte, N> from_hex_exactly(std::string_view hex, const char* what) {
  std::array<std::byte, N> out{};
  std::size_t written = 0;
  const char* end = nullptr;
  if (hex.size() != 2 * N ||
      sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), N, hex.data(), hex.size(),
                     nullptr, &written, &end) != 0 ||
      written != N) {
    throw Error(errc::invalid_argument,
                std::string(what) + ": expected " + std::to_string(2 * N) + " hex digits");
  }
  return out;
}

std::string to_hex(std::span<const std::byte> bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                 bytes.size());
  out.pop_back();
  return out;
}

// "<tag> <hex>" from a key file; throws naming the file.
std::string read_key_line(const std::string& path, std::string_view tag) {
  std::ifstream in(path);
  if (!in) throw Error(errc::io, "cannot read key file '" + path + "'");
  std::string line;
  std::getline(in, line);
  std::istringstream words(line);
  std::string found_tag;
  std::string hex;
  words >> found_tag >> hex;
  if (found_tag != tag) {
    throw Error(errc::invalid_argument,
                "'" + path + "' is not a " + std::string(tag) + " key file (it starts with '" +
                    found_tag.substr(0, 40) + "')");
  }
  return hex;
}

}  // namespace

void ensure_sodium() {
  static const int ready = sodium_init();
  if (ready < 0) throw Error(errc::invalid_argument, "libsodium could not be initialised");
}

ContentDigest content_digest(std::span<const std::byte> bytes) {
  ensure_sodium();
  ContentDigest digest{};
  crypto_generichash(reinterpret_cast<unsigned char*>(digest.data()), digest.size(),
                     reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), nullptr,
                     0);
  return digest;
}

// ---- PublicKey -------------------------------------------------------------------

PublicKey PublicKey::from_hex(std::string_view hex) {
  ensure_sodium();
  return PublicKey(from_hex_exactly<size>(hex, "public key"));
}

PublicKey PublicKey::load(const std::string& path) {
  try {
    return from_hex(read_key_line(path, kPublicTag));
  } catch (const Error& e) {
    if (e.is(errc::io)) throw;
    throw Error(errc::invalid_argument, path + ": " + e.context());
  }
}

namespace {
// Why `path` could not be written, for a person to act on: a missing
// directory said as such (the usual case), otherwise the system's reason.
std::string why_not_written(const std::string& path, int error) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ignored;
  if (!parent.empty() && !std::filesystem::exists(parent, ignored))
    return "its directory '" + parent.string() + "' does not exist";
  return std::strerror(error);
}

// Writes `text` to `path` through a temporary file beside it, renamed over
// it: a failure leaves an existing file whole, and a symlink at `path` is
// replaced, never written through. The temporary is made 0600 (mkstemp), so a
// secret is never readable by others, not even for a moment; a public key is
// then opened to 0644.
void write_key_file(const std::string& path, const std::string& text, bool secret,
                    const char* what) {
  std::string temporary = path + ".XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) {
    const int error = errno;
    throw Error(errc::io, std::string("cannot write ") + what + " file '" + path +
                              "': " + why_not_written(path, error));
  }
  int error = 0;
  if (!secret && ::fchmod(fd, S_IRUSR | S_IWUSR | S_IRGRP | S_IROTH) != 0) error = errno;
  if (error == 0 && !detail::write_exactly(fd, text.data(), text.size())) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    throw Error(errc::io, std::string("cannot write ") + what + " file '" + path +
                              "': " + std::strerror(error));
  }
}
}  // namespace

void PublicKey::save(const std::string& path) const {
  write_key_file(path, std::string(kPublicTag) + ' ' + hex() + '\n', false, "public key");
}

std::string PublicKey::hex() const {
  return to_hex(bytes_);
}

// ---- KeyPair ------------------------------------------------------------------------

struct KeyPair::Secret {
  std::array<unsigned char, crypto_sign_SECRETKEYBYTES> secret{};
  PublicKey public_key;
  Secret() = default;
  Secret(const Secret&) = delete;
  Secret& operator=(const Secret&) = delete;
  ~Secret() { sodium_memzero(secret.data(), secret.size()); }
};

KeyPair KeyPair::generate() {
  ensure_sodium();
  auto secret = std::make_shared<Secret>();
  PublicKey::Bytes pk{};
  crypto_sign_keypair(reinterpret_cast<unsigned char*>(pk.data()), secret->secret.data());
  secret->public_key = PublicKey(pk);
  return KeyPair(std::move(secret));
}

KeyPair KeyPair::load(const std::string& secret_path) {
  ensure_sodium();
  std::array<std::byte, crypto_sign_SEEDBYTES> seed{};
  try {
    seed = from_hex_exactly<crypto_sign_SEEDBYTES>(read_key_line(secret_path, kSecretTag),
                                                   "secret key");
  } catch (const Error& e) {
    if (e.is(errc::io)) throw;
    throw Error(errc::invalid_argument, secret_path + ": " + e.context());
  }
  auto secret = std::make_shared<Secret>();
  PublicKey::Bytes pk{};
  crypto_sign_seed_keypair(reinterpret_cast<unsigned char*>(pk.data()), secret->secret.data(),
                           reinterpret_cast<const unsigned char*>(seed.data()));
  sodium_memzero(seed.data(), seed.size());
  secret->public_key = PublicKey(pk);
  return KeyPair(std::move(secret));
}

void KeyPair::save(const std::string& secret_path, const std::string& public_path) const {
  // Owner-only (0600) from the start (write_key_file).
  std::array<unsigned char, crypto_sign_SEEDBYTES> seed{};
  crypto_sign_ed25519_sk_to_seed(seed.data(), secret_->secret.data());
  std::string line = std::string(kSecretTag) + ' ' + to_hex(std::as_bytes(std::span(seed))) + '\n';
  sodium_memzero(seed.data(), seed.size());
  try {
    write_key_file(secret_path, line, true, "secret key");
  } catch (...) {
    sodium_memzero(line.data(), line.size());
    throw;
  }
  sodium_memzero(line.data(), line.size());
  if (!public_path.empty()) public_key().save(public_path);
}

const PublicKey& KeyPair::public_key() const noexcept {
  return secret_->public_key;
}

KeyPair::Signature KeyPair::sign(std::span<const std::byte> message) const {
  Signature signature{};
  crypto_sign_detached(reinterpret_cast<unsigned char*>(signature.data()), nullptr,
                       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                       secret_->secret.data());
  return signature;
}

bool verify_signature(const PublicKey& key, std::span<const std::byte> message,
                      std::span<const std::byte> signature) noexcept {
  if (signature.size() != crypto_sign_BYTES) return false;
  if (sodium_init() < 0) return false;
  return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(),
                                     reinterpret_cast<const unsigned char*>(key.bytes().data())) ==
         0;
}

void random_bytes(std::span<std::byte> out) {
  ensure_sodium();
  randombytes_buf(out.data(), out.size());
}

// ---- Trust ------------------------------------------------------------------------------

Trust Trust::anyone() {
  Trust trust;
  trust.any_peer_ = true;
  trust.any_code_ = true;
  trust.unsigned_code_ = true;
  return trust;
}

Trust& Trust::allow_peer(const PublicKey& key) {
  if (!accepts_peer(key)) peers_.push_back(key);
  return *this;
}

Trust& Trust::allow_code_signer(const PublicKey& key) {
  if (!accepts_code_signer(key)) code_signers_.push_back(key);
  return *this;
}

Trust& Trust::allow_native_code_signer(const PublicKey& key) {
  (void)allow_code_signer(key);
  if (!runs_native_code_of(key)) native_signers_.push_back(key);
  return *this;
}

bool Trust::runs_native_code_of(const PublicKey& key) const noexcept {
  return any_code_ ||
         std::find(native_signers_.begin(), native_signers_.end(), key) != native_signers_.end();
}

Trust& Trust::allow_unsigned_code() noexcept {
  unsigned_code_ = true;
  return *this;
}

bool Trust::accepts_peer(const PublicKey& key) const noexcept {
  return any_peer_ || std::find(peers_.begin(), peers_.end(), key) != peers_.end();
}

bool Trust::accepts_code_signer(const PublicKey& key) const noexcept {
  return any_code_ || std::find(code_signers_.begin(), code_signers_.end(), key) != code_signers_.end();
}

}  // namespace threechains
