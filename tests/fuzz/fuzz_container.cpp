// libFuzzer target: the code-container parser (zstd frame, LLVM OffloadBinary
// images, name, triples, dependency list), which a target runs on code that
// arrived from the network before anything is compiled.
#include <threechains/container.hpp>
#include <threechains/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const threechains::ContainerInfo info = threechains::inspect_container(bytes);
    (void)info;
  } catch (const threechains::Error&) {  // a clear rejection is the expected outcome
  }
  return 0;
}
