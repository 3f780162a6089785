// threechains-key: Ed25519 keys for peers and code signing; signs and checks
// containers.
//
//   threechains-key generate --secret me.key --public me.pub
//   threechains-key public --secret me.key --public me.pub
//   threechains-key sign --key me.key counter.tcc [-o signed.tcc]
//   threechains-key verify --trust me.pub [--trust other.pub] counter.tcc
#include <threechains/container.hpp>
#include <threechains/error.hpp>
#include <threechains/trust.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

namespace {

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw threechains::Error(threechains::errc::io, "cannot read '" + path + "'");
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  return bytes;
}

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw threechains::Error(threechains::errc::io, "cannot write '" + path + "'");
}

}  // namespace

int main(int argc, char** argv) {
  namespace tc = threechains;
  CLI::App app{"ThreeChains keys: generate Ed25519 key pairs, sign and verify code containers"};
  app.require_subcommand(1);

  std::string secret;
  std::string public_key;
  auto* generate = app.add_subcommand("generate", "generate a key pair");
  generate->add_option("--secret", secret, "secret key file to write (mode 0600)")->required();
  generate->add_option("--public", public_key, "public key file to write")->required();

  auto* show = app.add_subcommand("public", "write the public key of a secret key");
  show->add_option("--secret", secret, "secret key file")->required();
  show->add_option("--public", public_key, "public key file to write (default: print it)");

  std::string container;
  std::string output;
  auto* sign = app.add_subcommand("sign", "sign a container (in place unless -o)");
  sign->add_option("--key", secret, "secret key file")->required();
  sign->add_option("container", container, "container to sign")->required();
  sign->add_option("-o,--output", output, "signed container to write");

  std::vector<std::string> trusted;
  auto* verify = app.add_subcommand("verify", "check a container's signature against keys");
  verify->add_option("--trust", trusted, "public key file of a trusted signer")->required();
  verify->add_option("container", container, "container to check")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*generate) {
      // A key's directory is made if missing (the secret's owner-only): a
      // build that puts keys under its own tree need not make it first.
      for (const auto& [file, mode] : {std::pair{secret, std::filesystem::perms::owner_all},
                                       std::pair{public_key, std::filesystem::perms::none}}) {
        const std::filesystem::path parent = std::filesystem::path(file).parent_path();
        if (parent.empty() || std::filesystem::exists(parent)) continue;
        std::filesystem::create_directories(parent);
        if (mode != std::filesystem::perms::none) std::filesystem::permissions(parent, mode);
      }
      tc::KeyPair::generate().save(secret, public_key);
    } else if (*show) {
      const tc::KeyPair key = tc::KeyPair::load(secret);
      if (public_key.empty()) {
        fmt::print("{}\n", key.public_key().hex());
      } else {
        key.public_key().save(public_key);
      }
    } else if (*sign) {
      const tc::KeyPair key = tc::KeyPair::load(secret);
      const std::vector<std::byte> bytes = read_file(container);
      (void)tc::inspect_container(bytes);  // sign containers only
      write_file(output.empty() ? container : output, tc::sign_container(bytes, key));
    } else if (*verify) {
      const std::optional<tc::PublicKey> signer = tc::container_signer(read_file(container));
      if (!signer) {
        fmt::print(stderr, "threechains-key: {} is not signed\n", container);
        return 1;
      }
      for (const std::string& path : trusted) {
        if (tc::PublicKey::load(path) == *signer) {
          fmt::print("{}: signed by {} ({})\n", container, signer->hex(), path);
          return 0;
        }
      }
      fmt::print(stderr, "threechains-key: {} is signed by {}, which none of the keys given is\n",
                 container, signer->hex());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "threechains-key: {}\n", e.what());
    return 1;
  }
}
