// The verifiers' table of path states (confine/verifier_calls.hpp): what
// it keeps, and that a sender's choice of addresses costs the verifier's
// budget, never unbounded time.
#include "confine/verifier_calls.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
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
