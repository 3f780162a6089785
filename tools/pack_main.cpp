// threechains-pack: packs per-triple bitcode or object files into one fat
// ThreeChains code container (concatenated LLVM OffloadBinary images).
#include <threechains/codec.hpp>
#include <threechains/container.hpp>
#include <threechains/error.hpp>
#include <threechains/trust.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <array>
#include <cstring>
#include <fstream>
#include <iterator>

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

// LLVM bitcode, bare ('BC' 0xC0DE) or in its wrapper (0x0B17C0DE).
bool is_bitcode(const std::vector<std::byte>& bytes) {
  constexpr std::array<unsigned char, 4> bare = {'B', 'C', 0xC0, 0xDE};
  constexpr std::array<unsigned char, 4> wrapper = {0xDE, 0xC0, 0x17, 0x0B};
  if (bytes.size() < 4) return false;
  return std::memcmp(bytes.data(), bare.data(), 4) == 0 ||
         std::memcmp(bytes.data(), wrapper.data(), 4) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pack an ifunc library's per-triple images into a ThreeChains code container"};
  std::string name;
  std::string codec = "bitcode";
  std::vector<std::string> images;
  std::vector<std::string> deps;
  std::string output;
  std::string sign_key;
  app.add_option("--name", name, "ifunc name; its entry point is <name>_main")->required();
  app.add_option("--codec", codec,
                 "bitcode, binary, or tiered (per triple an object and IR: each image's kind "
                 "is read from its file)")
      ->check(CLI::IsMember({"bitcode", "binary", "tiered"}));
  app.add_option("--image", images, "TRIPLE=FILE, one per target triple (and kind, if tiered)")
      ->required();
  app.add_option("--dep", deps, "shared library the ifunc needs on the target (e.g. libm.so.6)");
  app.add_option("-o,--output", output, "container to write")->required();
  app.add_option("--sign-key", sign_key, "secret key file to sign the container with");
  CLI11_PARSE(app, argc, argv);

  try {
    threechains::IfuncLibrary library{name, {}, deps};
    for (const std::string& spec : images) {
      const auto eq = spec.find('=');
      if (eq == std::string::npos)
        throw threechains::Error(threechains::errc::io, "--image wants TRIPLE=FILE: " + spec);
      std::vector<std::byte> bytes = read_file(spec.substr(eq + 1));
      // GPU images (nvptx64-...) are bitcode in every codec's container.
      const auto kind = codec == "bitcode" || threechains::is_gpu_triple(spec.substr(0, eq))
                            ? threechains::CodecId::bitcode
                        : codec == "binary" ? threechains::CodecId::binary
                        : is_bitcode(bytes) ? threechains::CodecId::bitcode
                                            : threechains::CodecId::binary;
      library.images.push_back({spec.substr(0, eq), kind, std::move(bytes)});
    }
    std::vector<std::byte> container = codec == "bitcode" ? threechains::BitcodeCodec::encode(library)
                                       : codec == "binary"
                                           ? threechains::BinaryCodec::encode(library)
                                           : threechains::TieredCodec::encode(library);
    if (!sign_key.empty())
      container = threechains::sign_container(container, threechains::KeyPair::load(sign_key));
    std::ofstream out(output, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(container.data()),
              static_cast<std::streamsize>(container.size()));
    if (!out) throw threechains::Error(threechains::errc::io, "cannot write '" + output + "'");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "threechains-pack: {}\n", e.what());
    return 1;
  }
}
