// threechains-inspect: prints what a code container holds (name, codec,
// triples and image sizes, dependencies, identity) and whether this host can run it.
#include <threechains/container.hpp>
#include <threechains/ifunc.hpp>

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"Inspect a ThreeChains code container"};
  std::vector<std::string> paths;
  std::string unpack;
  app.add_option("container", paths, ".tcc files")->required();
  app.add_option(
      "--unpack", unpack,
      "write the (single) container's plain OffloadBinary images here, for llvm-offload-binary");
  CLI11_PARSE(app, argc, argv);
  int rc = 0;
  for (const std::string& path : paths) {
    try {
      const threechains::Ifunc ifunc = threechains::Ifunc::load(path);
      const threechains::ContainerInfo& info = ifunc.info();
      const std::vector<std::byte> raw = threechains::unpacked_container(ifunc.code());
      fmt::print("{}: ifunc '{}', {} codec, {} bytes ({} unpacked), identity {:016x}\n", path,
                 info.name, threechains::to_string(info.codec), ifunc.code().size(), raw.size(),
                 ifunc.id());
      if (!unpack.empty()) {
        std::FILE* out = std::fopen(unpack.c_str(), "wb");
        if (out == nullptr || std::fwrite(raw.data(), 1, raw.size(), out) != raw.size()) {
          throw threechains::Error(threechains::errc::io, "cannot write " + unpack);
        }
        std::fclose(out);
      }
      bool runs_here = false;
      for (std::size_t i = 0; i < info.triples.size(); ++i) {
        const bool match = threechains::same_target(info.triples[i], threechains::host_triple());
        runs_here |= match;
        fmt::print("  image {:<28} {:>7} bytes{}\n", info.triples[i], info.image_sizes[i],
                   match ? "  <- this host" : "");
      }
      for (const std::string& dep : info.deps) fmt::print("  needs {}\n", dep);
      if (!runs_here) fmt::print("  no image for this host ({})\n", threechains::host_triple());
    } catch (const std::exception& e) {
      fmt::print(stderr, "threechains-inspect: {}\n", e.what());
      rc = 1;
    }
  }
  return rc;
}
