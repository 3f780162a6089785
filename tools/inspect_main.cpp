// threechains-inspect: prints what a code container holds (name, codec,
// triples and image sizes, what each image imports, dependencies, identity)
// and whether this host can run it; with --frame, what a captured frame's
// header says, and the container it carries, if any.
#include <threechains/container.hpp>
#include <threechains/frame.hpp>
#include <threechains/ifunc.hpp>

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace tc = threechains;

namespace {

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tc::Error(tc::errc::io, "cannot read '" + path + "'");
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  return bytes;
}

// The container's images, sizes, imports and dependencies.
void print_container(const tc::Ifunc& ifunc, const std::string& label) {
  const tc::ContainerInfo& info = ifunc.info();
  const std::vector<std::byte> raw = tc::unpacked_container(ifunc.code());
  fmt::print(
      "{}: ifunc '{}', {} codec, {} bytes ({} unpacked), identity {:016x}{}\n", label, info.name,
      tc::to_string(info.codec), ifunc.code().size(), raw.size(), ifunc.id(),
      info.claimed_signer.empty() ? ", unsigned" : ", says it is signed by " + info.claimed_signer);
  const std::vector<std::vector<std::string>> imports = tc::container_imports(ifunc.code());
  bool runs_here = false;
  for (std::size_t i = 0; i < info.triples.size(); ++i) {
    const bool match = tc::same_target(info.triples[i], tc::host_triple());
    runs_here |= match;
    fmt::print("  image {:<28} {:>7} bytes{}\n", info.triples[i], info.image_sizes[i],
               match ? "  <- this host" : "");
    std::string names;
    for (const std::string& name : imports[i]) names += (names.empty() ? "" : " ") + name;
    fmt::print("    imports: {}\n", names.empty() ? "(nothing)" : names);
  }
  for (const std::string& dep : info.deps) fmt::print("  needs {}\n", dep);
  if (!runs_here) fmt::print("  no image for this host ({})\n", tc::host_triple());
}

void print_frame(const std::string& path) {
  const std::vector<std::byte> bytes = read_file(path);
  const tc::FrameView view = tc::FrameView::parse_or_throw(bytes);
  const tc::FrameHeader& h = view.header();
  fmt::print("{}: frame of {} bytes: codec {}, code {:016x}, sequence {}, {} B payload, {}\n", path,
             view.size(), tc::to_string(static_cast<tc::CodecId>(h.codec)), h.code_id, h.sequence,
             h.payload_size,
             view.has_code() ? fmt::format("{} B code (a first frame)", h.code_size)
                             : std::string("no code (cached: the target must hold it)"));
  if (bytes.size() > view.size())
    fmt::print("  {} bytes after the frame\n", bytes.size() - view.size());
  if (view.has_code()) {
    const tc::Ifunc carried =
        tc::Ifunc::from_container(std::vector<std::byte>(view.code().begin(), view.code().end()));
    if (carried.id() != view.code_id())
      fmt::print("  the code does not hash to the identity the header names\n");
    print_container(carried, "  carried code");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect ThreeChains code containers and captured frames"};
  std::vector<std::string> paths;
  std::vector<std::string> frames;
  std::string unpack;
  app.add_option("container", paths, ".tcc files");
  app.add_option("--frame", frames, "a captured frame (header, payload, code) to decode");
  app.add_option(
      "--unpack", unpack,
      "write the (single) container's plain OffloadBinary images here, for llvm-offload-binary");
  CLI11_PARSE(app, argc, argv);
  if (paths.empty() && frames.empty()) {
    fmt::print(stderr, "threechains-inspect: give containers or --frame files\n");
    return 2;
  }
  int rc = 0;
  for (const std::string& path : paths) {
    try {
      const tc::Ifunc ifunc = tc::Ifunc::load(path);
      print_container(ifunc, path);
      if (!unpack.empty()) {
        const std::vector<std::byte> raw = tc::unpacked_container(ifunc.code());
        std::FILE* out = std::fopen(unpack.c_str(), "wb");
        const bool written =
            out != nullptr && std::fwrite(raw.data(), 1, raw.size(), out) == raw.size();
        if (out != nullptr) std::fclose(out);
        if (!written) throw tc::Error(tc::errc::io, "cannot write " + unpack);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "threechains-inspect: {}\n", e.what());
      rc = 1;
    }
  }
  for (const std::string& path : frames) {
    try {
      print_frame(path);
    } catch (const std::exception& e) {
      fmt::print(stderr, "threechains-inspect: {}: {}\n", path, e.what());
      rc = 1;
    }
  }
  return rc;
}
