// threechains-inspect: prints what a code container holds (name, codec,
// triples and image sizes, dependencies, identity) and whether this host can run it.
#include <threechains/container.hpp>
#include <threechains/ifunc.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"Inspect a ThreeChains code container"};
  std::vector<std::string> paths;
  app.add_option("container", paths, ".tcc files")->required();
  CLI11_PARSE(app, argc, argv);
  int rc = 0;
  for (const std::string& path : paths) {
    try {
      const threechains::Ifunc ifunc = threechains::Ifunc::load(path);
      const threechains::ContainerInfo& info = ifunc.info();
      fmt::print("{}: ifunc '{}', {} codec, {} bytes, identity {:016x}\n", path, info.name,
                 threechains::to_string(info.codec), ifunc.code().size(), ifunc.id());
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
