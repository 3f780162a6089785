// libFuzzer target: the window verifier for aarch64 (confine/verify_aarch64.hpp),
// on any host. The input is A64 machine code at a fixed address of a window
// that is never mapped (the verifier reads words; it runs none), entered at
// its first word and at the word its first 4 bytes name. What this checks
// here: the verifier never crashes, reads outside its input or overflows
// (ASan, UBSan), ends within its budget, and gives the same verdict twice.
// Whether what it accepts can escape is the aarch64 check's differential
// test, which runs accepted mutants on an aarch64 CPU
// (tests/window_aarch64/check.cpp, under qemu in CI's aarch64 stage).
#include "confine/verify_aarch64.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace tc = threechains::confined;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  constexpr uint64_t kWindowBase = uint64_t{0x7f} << 32;
  constexpr uint64_t kCode = kWindowBase + 0x10000;
  if (size < 4) return 0;
  uint32_t second = 0;
  std::memcpy(&second, data, 4);
  const std::size_t words = size / 4;
  const uint64_t entries[2] = {kCode, kCode + 4 * (second % words)};
  const tc::CodeRange range{kCode, {reinterpret_cast<const std::byte*>(data), size}};
  const tc::VerifierInput input{{&range, 1}, entries, kWindowBase};
  const tc::Verdict first = tc::verify_window_code_aarch64(input);
  const tc::Verdict again = tc::verify_window_code_aarch64(input);
  if (first.accepted != again.accepted || first.refusal != again.refusal ||
      first.stack_bytes != again.stack_bytes)
    std::abort();  // a verdict that depends on anything but its input
  return 0;
}
