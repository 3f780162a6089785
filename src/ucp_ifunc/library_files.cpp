#include "ucp_ifunc/library_files.hpp"

#include <threechains/container.hpp>
#include <threechains/error.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace threechains::ucp_ifunc {
namespace {

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(errc::io, "cannot open '" + path + "'");
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  return bytes;
}

}  // namespace

Ifunc load_library_file(const std::string& directory, const std::string& name) {
  const std::string stem = directory + "/" + name;
  std::error_code ignored;
  if (std::filesystem::exists(stem + ".tcc", ignored)) return Ifunc::load(stem + ".tcc");
  if (std::filesystem::exists(stem + ".bc", ignored)) {
    // The source and the target pack the same file alike, so its code has
    // the same identity on both: the target runs it as its own library.
    IfuncLibrary library{name, {{host_triple(), CodecId::bitcode, read_bytes(stem + ".bc")}}, {}};
    try {
      return Ifunc::from_container(pack_container(library));
    } catch (const Error& e) {
      throw Error(errc::bad_container, stem + ".bc: " + e.what());
    }
  }
  if (std::filesystem::exists(stem + ".so", ignored)) {
    throw Error(errc::io, "found " + stem + ".so, a shared object, which is never loaded here " +
                              "(dlopen would run its code before any check): put " + name +
                              ".bc beside it (clang -c -emit-llvm, as the prototypes' Makefiles " +
                              "do) or build " + name + ".tcc with threechains-build");
  }
  throw Error(errc::io, "no ifunc library '" + name + "' in " + directory + " (looked for " +
                            stem + ".tcc and " + stem + ".bc)");
}

}  // namespace threechains::ucp_ifunc
