// The verifiers' table of path states (confine/verifier_calls.hpp): what
// it keeps, and that a sender's choice of addresses costs the verifier's
// budget, never unbounded time.
#include "confine/verifier_calls.hpp"
#if defined(__x86_64__)
#include "confine/verify_x86.hpp"
#endif

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

using threechains::confined::AddressStates;
using threechains::confined::secret_hash_key;
using threechains::confined::verifier_text::Refusal;

TEST_CASE("the verifier's table of states keeps each address's state as it grows", "[verifier]") {
  uint64_t budget = uint64_t{1} << 40;
  AddressStates<uint64_t> states(secret_hash_key(), budget);
  CHECK_THROWS_AS(states.at(0x1000), std::logic_error);  // nothing there yet
  // Neighbours, and addresses whose low 20 bits are all alike.
  std::vector<uint64_t> addresses;
  for (uint64_t k = 0; k < 20000; ++k) addresses.push_back(0x7f0000000000 + k);
  for (uint64_t k = 1; k <= 20000; ++k) addresses.push_back(0x7f0000000000 + (k << 20));
  for (const uint64_t address : addresses) {
    const auto [state, fresh] = states.try_emplace(address, address ^ 0x5a5a);
    REQUIRE(fresh);
    REQUIRE(*state == (address ^ 0x5a5a));
  }
  CHECK(states.size() == addresses.size());
  for (const uint64_t address : addresses) {
    const auto [state, fresh] = states.try_emplace(address, 0);
    CHECK_FALSE(fresh);
    CHECK(*state == (address ^ 0x5a5a));
    states.at(address) += 1;
  }
  for (const uint64_t address : addresses) CHECK(states.at(address) == (address ^ 0x5a5a) + 1);
  CHECK_THROWS_AS(states.at(0x7f0000000000 + 20000), std::logic_error);
}

TEST_CASE("the verifier's table of states pays each probe from the verifier's budget",
          "[verifier]") {
  // What 1000 inserts cost with a fair hash, then the same with a budget
  // smaller than that: refused, not run long.
  uint64_t plenty = 1 << 20;
  {
    AddressStates<int> states(secret_hash_key(), plenty);
    for (uint64_t k = 0; k < 1000; ++k) (void)states.try_emplace(0x400000 + 4 * k, 1);
  }
  const uint64_t spent = (uint64_t{1} << 20) - plenty;
  CHECK(spent >= 1000);      // one probe an insert at least, and the growths' re-inserts
  CHECK(spent <= 8 * 1000);  // and few: the hash spreads them
  uint64_t scarce = spent / 2;
  AddressStates<int> states(secret_hash_key(), scarce);
  CHECK_THROWS_AS(
      [&] {
        for (uint64_t k = 0; k < 1000; ++k) (void)states.try_emplace(0x400000 + 4 * k, 1);
      }(),
      Refusal);
}

TEST_CASE("code laid out to collide in a known hash of the verifier's table is read in no time",
          "[verifier]") {
#if defined(__x86_64__)
  // An attacker's object: one function that is a chain of jumps, each at an
  // address whose product with Fibonacci hashing's multiplier (a fixed,
  // public hash, what the table first used) lies in the lowest 32nd of
  // 2^64, so in the lowest 32nd of the table at every size: a quarter of a
  // million instructions in one run of slots, each insert walking it (some
  // 3e10 probes). With the keyed hash they spread like any others.
  constexpr uint64_t kWindowBase = uint64_t{0x7f} << 32;
  constexpr uint64_t kCode = kWindowBase + 0x10000;
  constexpr uint64_t kFibonacci = 0x9E3779B97F4A7C15ULL;
  std::vector<std::byte> code(std::size_t{8} << 20, std::byte{0xcc});  // int3, never reached
  std::vector<uint64_t> at;
  for (uint64_t offset = 0; offset + 5 <= code.size(); ++offset)
    if ((kCode + offset) * kFibonacci < ~uint64_t{0} / 32 &&
        (at.empty() || offset >= at.back() + 5))
      at.push_back(offset);
  REQUIRE(at.size() > 200000);
  for (std::size_t k = 0; k + 1 < at.size(); ++k) {
    const auto rel = static_cast<int32_t>(at[k + 1] - (at[k] + 5));
    code[at[k]] = std::byte{0xe9};  // jmp rel32
    std::memcpy(code.data() + at[k] + 1, &rel, 4);
  }
  code[at.back()] = std::byte{0xc3};  // ret
  const threechains::confined::CodeRange range{kCode, code};
  const uint64_t entry = kCode + at.front();
  const threechains::confined::Verdict verdict =
      threechains::confined::verify_window_code_x86_64({{&range, 1}, {&entry, 1}, kWindowBase});
  INFO(verdict.refusal);
  CHECK(verdict.accepted);
  CHECK(verdict.instructions == at.size());
#else
  WARN("SKIP: the attacker's layout is x86-64 code");
#endif
}
