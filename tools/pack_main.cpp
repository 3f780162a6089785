// threechains-pack: packs per-triple bitcode or object files into one fat
// ThreeChains code container (concatenated LLVM OffloadBinary images).
#include <threechains/codec.hpp>
#include <threechains/container.hpp>
#include <threechains/error.hpp>
#include <threechains/trust.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

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
  app.add_option("--codec", codec, "bitcode or binary")
      ->check(CLI::IsMember({"bitcode", "binary"}));
  app.add_option("--image", images, "TRIPLE=FILE, one per target triple")->required();
  app.add_option("--dep", deps, "shared library the ifunc needs on the target (e.g. libm.so.6)");
  app.add_option("-o,--output", output, "container to write")->required();
  app.add_option("--sign-key", sign_key, "secret key file to sign the container with");
  CLI11_PARSE(app, argc, argv);

  try {
    threechains::IfuncLibrary library{name, {}, deps};
    const auto kind =
        codec == "bitcode" ? threechains::CodecId::bitcode : threechains::CodecId::binary;
    for (const std::string& spec : images) {
      const auto eq = spec.find('=');
      if (eq == std::string::npos)
        throw threechains::Error(threechains::errc::io, "--image wants TRIPLE=FILE: " + spec);
      library.images.push_back({spec.substr(0, eq), kind, read_file(spec.substr(eq + 1))});
    }
    std::vector<std::byte> container = kind == threechains::CodecId::bitcode
                                                 ? threechains::BitcodeCodec::encode(library)
                                                 : threechains::BinaryCodec::encode(library);
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
