// Code containers: the fat, multi-ISA code section an ifunc carries. One image
// per target triple and kind, LLVM bitcode and/or a relocatable object, plus the
// ifunc's name and the shared libraries it needs. The format on the wire is
// LLVM's own multi-image container (llvm::object::OffloadBinary, one per image,
// concatenated, usually in one zstd frame), so `llvm-offload-binary` can read
// what ThreeChains writes once it is unpacked (unpacked_container).
// Implemented in the compiled library: no LLVM header reaches this one.
#pragma once

#include <threechains/frame.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace threechains {

struct CodeImage {
  std::string triple;               // e.g. "x86_64-linux-gnu"
  CodecId kind = CodecId::bitcode;  // bitcode module or relocatable object
  std::vector<std::byte> bytes;
};

// An ifunc library on the source, before packing.
struct IfuncLibrary {
  std::string name;               // entry point is <name>_main
  std::vector<CodeImage> images;  // one per triple
  std::vector<std::string> deps;  // shared libraries to load on the target, e.g. "libm.so.6"
};

// What a container says about itself, read without compiling anything.
struct ContainerInfo {
  std::string name;
  CodecId codec = CodecId::bitcode;
  std::vector<std::string> triples;
  std::vector<std::string> deps;
  std::vector<std::size_t> image_sizes;
  // Hex public key the container says signed it, empty if unsigned. Read,
  // not verified: a Receiver verifies (container_signer, trust.hpp).
  std::string claimed_signer;
};

// Packs a library into a container: images of one kind (a bitcode or binary
// container), or of both (tiered: per triple at most one of each kind).
// Bitcode images are stripped of what only the producer needs (the LTO symbol
// table, ident), and the whole container is one zstd
// frame when that is smaller (the usual case).
[[nodiscard]] std::vector<std::byte> pack_container(const IfuncLibrary& library);
namespace detail {
// The same, for a codec (codec.hpp): throws errc::bad_container if a CPU
// image is not of `codec`'s kind (tiered takes both kinds; GPU images ride
// along in any).
[[nodiscard]] std::vector<std::byte> pack_container_as(CodecId codec,
                                                       const IfuncLibrary& library);
}  // namespace detail

// The container as plain concatenated OffloadBinary images (inflated if it was
// compressed), as `llvm-offload-binary` reads them.
[[nodiscard]] std::vector<std::byte> unpacked_container(std::span<const std::byte> container);

// Parses a container; throws Error(errc::bad_container) saying what is malformed.
[[nodiscard]] ContainerInfo inspect_container(std::span<const std::byte> container);

// What each image (in container order) leaves to the target to resolve: the
// functions and globals its code uses but does not define, sorted. Reads the
// bitcode or object with LLVM; compiles nothing. Throws Error(bad_container).
[[nodiscard]] std::vector<std::vector<std::string>> container_imports(
    std::span<const std::byte> container);

// The identity of a code section: xxHash3-64 of its bytes.
[[nodiscard]] CodeId code_identity(std::span<const std::byte> code) noexcept;

// This process's target triple as LLVM normalises it (e.g. x86_64-unknown-linux-gnu).
[[nodiscard]] std::string host_triple();

// Whether a triple names a GPU (nvptx64-nvidia-cuda): its image is bitcode a
// Receiver with a GPU compiles for that GPU (gpu.hpp), never for its CPU.
[[nodiscard]] bool is_gpu_triple(std::string_view triple) noexcept;

// Whether two triples name the same target once normalised: vendor is ignored and
// an unknown environment matches any (x86_64-pc-linux-gnu == x86_64-linux-gnu).
[[nodiscard]] bool same_target(const std::string& a, const std::string& b);

}  // namespace threechains
