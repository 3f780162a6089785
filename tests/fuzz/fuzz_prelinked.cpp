// libFuzzer target: the pre-linked image loader (src/jit/prelinked_image.cpp),
// which maps, relocates and protects an ELF image from a container. Signed
// code only reaches it, but a signer's broken build must still be an error,
// never a write outside the mapping. Every import resolves to a harmless
// address; nothing loaded is run.
#include "jit/image_memory.hpp"
#include "jit/prelinked_image.hpp"

#include <threechains/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace {
uint64_t import_slot = 0;  // what every import resolves to
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static threechains::jit::ImageMemory memory;  // kept blocks, reused across inputs
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const threechains::jit::PrelinkedImage image = threechains::jit::PrelinkedImage::load(
        bytes, "fuzzed",
        [](llvm::StringRef, bool) { return reinterpret_cast<uint64_t>(&import_slot); }, memory);
    (void)image.find("fuzzed_main");
  } catch (const threechains::Error&) {  // a clear rejection is the expected outcome
  }
  return 0;
}
