// Internal: the stack a verified function needs with its calls, shared by
// the window verifiers (verify_x86.cpp, verify_aarch64.cpp). A depth-first
// walk of the call graph on a stack of its own: the verifier's recursion
// would be as deep as the calls it reads (helper-14 ended the x86 verifier
// with a chain of 6000). A function that can call itself is refused (then
// nothing bounds the stack), and so is a need past the limit.
#pragma once

#include "confine/verifier.hpp"

#include <bit>
#include <concepts>
#include <cstdint>
#include <deque>
#include <limits>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace threechains::confined {

// The key of AddressStates' hash: drawn once a process (the kernel's
// random bytes), so a code's verdict does not change from one reading to
// the next, and no sender knows it.
inline uint64_t secret_hash_key() {
  static const uint64_t key = [] {
    std::random_device random;
    return (uint64_t{random()} << 32) ^ uint64_t { random() };
  }();
  return key;
}

// What a verifier's path analysis knows at each instruction address of
// one function: the states in a deque (no copies as it grows, no room
// kept spare: aarch64's state is 528 bytes), and an index of them by
// address in a table of open addressing (16-byte slots, linear probing, at
// most half full). On a 146 KB object (2026-11-29) std::unordered_map's
// node per instruction, and a set of every address read beside it, were a
// third of the verifier's time. The hash is keyed by a secret, and every
// probe is paid from a budget of probes: the addresses are the sender's to
// choose, and a known hash would let it line them up in one run of slots,
// each insert then walking all of them. With the key secret, a lookup
// took 1.3-1.6 probes and an insert about 3 (its share of the growths
// included), for runs of 1-, 4- and 1-to-15-byte steps up to a million
// addresses (a throwaway count, 2026-11-29), so the budget (16 times the
// verifier's budget of steps, which runs out first) is not what refuses
// honest code.
template <class Value>
class AddressStates {
 public:
  // `key`: secret; `budget`: the probes the verifier has left, shared by
  // its tables.
  AddressStates(uint64_t key, uint64_t& budget) : key_(key), budget_(budget) {}

  // The state at `address`: inserted as `value` if there was none
  // (`second` true), else the one there (`second` false).
  std::pair<Value*, bool> try_emplace(uint64_t address, const Value& value) {
    if (2 * (values_.size() + 1) > slots_.size()) grow();
    Slot& slot = slot_for(address);
    if (slot.index != 0) return {&values_[slot.index - 1], false};
    values_.push_back(value);
    slot = {address, static_cast<uint32_t>(values_.size())};
    return {&values_.back(), true};
  }
  // The state at `address`, which must be there.
  [[nodiscard]] Value& at(uint64_t address) {
    if (slots_.empty()) throw std::logic_error("verifier: no state at an address it reached");
    const Slot& slot = slot_for(address);
    if (slot.index == 0) throw std::logic_error("verifier: no state at an address it reached");
    return values_[slot.index - 1];
  }
  [[nodiscard]] std::size_t size() const noexcept { return values_.size(); }

 private:
  struct Slot {
    uint64_t address = 0;
    uint32_t index = 0;  // into values_, plus one; 0: free
  };
  // Where `address` is, or the free slot where it would go. Never full.
  Slot& slot_for(uint64_t address) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t at = static_cast<std::size_t>(mix(address ^ key_) >> shift_);
    for (;;) {
      if (budget_ == 0)
        throw verifier_text::Refusal{"code too intricate to verify within the verifier's budget"};
      --budget_;
      if (slots_[at].index == 0 || slots_[at].address == address) return slots_[at];
      at = (at + 1) & mask;
    }
  }
  // SplitMix64's finaliser: every bit of the address moves every bit of
  // the hash. A multiplication alone by a random odd key spread arithmetic
  // runs of addresses badly for some keys (a run of 4-byte steps, aarch64's,
  // took 51 probes a lookup at a million entries; measured 2026-11-29).
  static uint64_t mix(uint64_t x) noexcept {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  void grow() {
    if (values_.size() >= std::numeric_limits<uint32_t>::max() / 2)
      throw verifier_text::Refusal{"a function too large to verify"};
    std::vector<Slot> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 64 : 2 * old.size();
    slots_.assign(capacity, Slot{});
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(capacity));
    for (const Slot& slot : old)
      if (slot.index != 0) slot_for(slot.address) = slot;
  }
  uint64_t key_;
  uint64_t& budget_;
  std::vector<Slot> slots_;
  std::deque<Value> values_;
  unsigned shift_ = 64;
};

// One function as a verifier's path analysis found it.
struct AnalysedFunction {
  int64_t deepest = 0;                              // the most height any path reaches
  std::vector<std::pair<uint64_t, int64_t>> calls;  // callee, height at the call
};

template <class Analyse>
requires std::invocable<Analyse&, uint64_t>
class StackNeeds {
 public:
  // `return_address_bytes`: what a call pushes below the caller's height
  // (8 on x86-64; 0 on aarch64, where it goes to x30).
  StackNeeds(Analyse analyse, uint64_t max_stack_bytes, uint64_t return_address_bytes)
      : analyse_(std::move(analyse)), max_(max_stack_bytes), pushed_(return_address_bytes) {}

  uint64_t of(uint64_t root) {
    using verifier_text::hex;
    using verifier_text::Refusal;
    using verifier_text::say;
    if (const auto known = need_.find(root); known != need_.end()) return known->second;
    struct Open {
      uint64_t entry;
      AnalysedFunction function;
      std::size_t next_call = 0;
      uint64_t need = 0;   // of this function, its calls so far included
      uint64_t depth = 0;  // stack below the root's entry at this function's entry
    };
    const auto too_deep = [&] {
      throw Refusal{say(hex(root), ": needs more than ", max_, " bytes of stack with its calls")};
    };
    std::vector<Open> path;
    const auto open = [&](uint64_t entry, uint64_t depth) {
      if (!in_progress_.insert(entry).second)
        throw Refusal{
            say(hex(entry), ": a function that can call itself (the stack has no bound)")};
      AnalysedFunction function = analyse_(entry);
      const auto deepest = static_cast<uint64_t>(function.deepest);
      if (depth + deepest > max_) too_deep();
      path.push_back({entry, std::move(function), 0, deepest, depth});
    };
    open(root, 0);
    for (;;) {
      Open& top = path.back();
      if (top.next_call < top.function.calls.size()) {
        const auto [callee, height] = top.function.calls[top.next_call];
        const uint64_t below = static_cast<uint64_t>(height) + pushed_;
        if (const auto known = need_.find(callee); known != need_.end()) {
          top.need = std::max(top.need, below + known->second);
          ++top.next_call;
          if (top.depth + top.need > max_) too_deep();
        } else {
          open(callee, top.depth + below);  // `top` is not used after this
        }
        continue;
      }
      const uint64_t entry = top.entry;
      const uint64_t need = top.need;
      in_progress_.erase(entry);
      need_.emplace(entry, need);
      path.pop_back();
      if (path.empty()) return need;
      Open& caller = path.back();
      const auto height = static_cast<uint64_t>(caller.function.calls[caller.next_call].second);
      caller.need = std::max(caller.need, height + pushed_ + need);
      ++caller.next_call;
      if (caller.depth + caller.need > max_) too_deep();
    }
  }

 private:
  Analyse analyse_;
  uint64_t max_;
  uint64_t pushed_;
  std::unordered_map<uint64_t, uint64_t> need_;
  std::unordered_set<uint64_t> in_progress_;
};

}  // namespace threechains::confined
