// Internal: what the window verifiers (verify_x86.hpp, verify_aarch64.hpp)
// read and answer, and the words of a refusal they share. Each verifier is
// a linear decode plus one pass over each function's paths; neither calls
// into LLVM, which compiled the code they check.
#pragma once

#include <array>
#include <atomic>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

namespace threechains::confined {

// Executable bytes exactly as they will run, at the address they run from.
struct CodeRange {
  uint64_t address = 0;
  std::span<const std::byte> bytes;
};

struct VerifierInput {
  std::span<const CodeRange> code;    // every executable byte of the window
  std::span<const uint64_t> entries;  // where the host calls in (as void(...) functions)
  uint64_t window_base = 0;           // the window (4 GiB, guards around it) the code lies in
  uint64_t max_stack_bytes = 64 * 1024;
  // If set and true, the verifier stops and refuses (its owner is going).
  const std::atomic<bool>* stop = nullptr;
};

struct Verdict {
  bool accepted = false;
  std::string refusal;       // when refused: at which address, which rule, the instruction
  uint64_t stack_bytes = 0;  // when accepted: the most stack any entry can use, calls included
  // Instructions its paths reached, summed over the functions read (one
  // that two functions share counts twice).
  std::size_t instructions = 0;
  explicit operator bool() const noexcept { return accepted; }
};

namespace verifier_text {

// Raised inside a verifier, turned into the Verdict's refusal at the top.
struct Refusal {
  std::string why;
};

inline std::string hex(uint64_t value) {
  std::array<char, 16> digits{};
  const auto end = std::to_chars(digits.data(), digits.data() + digits.size(), value, 16).ptr;
  return "0x" + std::string(digits.data(), end);
}

// A refusal's words, numbers in decimal (addresses go through hex()).
template <class... Parts>
std::string say(const Parts&... parts) {
  std::string text;
  const auto append = [&text](const auto& part) {
    if constexpr (std::integral<std::decay_t<decltype(part)>>)
      text += std::to_string(part);
    else
      text += part;
  };
  (append(parts), ...);
  return text;
}

}  // namespace verifier_text
}  // namespace threechains::confined
