// KeyRecord and KeyBook: what a peer's key has done with confined code, kept
// across its connections for as long as the Receiver lives (a restart
// forgets; a reconnect does not).
//
// A key whose code traps ReceiverLimits::max_traps_per_code times has that
// content refused to it; a key whose code keeps trapping with ever new code
// (re-signed with fresh nonces) is throttled once it has trapped half of
// max_traps_per_key times within key_trap_window (a new load at most every
// key_load_interval) and refused as a key at max_traps_per_key, for
// key_refusal: its connections are closed with the reason and new ones are
// refused after their proof. docs/security.md, "What one frame can cost".
#pragma once

#include "engine/protocol.hpp"
#include "engine/transcript.hpp"
#include "trust/sodium.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace threechains::detail {

struct KeyRecord {
  using Clock = std::chrono::steady_clock;
  uint64_t serial = 0;  // tells keys apart cheaply (the confined runner's owner)
  std::string name;     // the key's start in hex, or "a peer without a key"
  std::map<ContentDigest, uint32_t> traps;  // per content, until banned
  std::set<ContentDigest> banned;           // refused to this key from now on
  std::deque<Clock::time_point> recent;     // its traps within the window, oldest first
  Clock::time_point refused_until{};
  Clock::time_point last_new_load{};
  std::size_t code_bytes = 0;  // what the code it loaded holds (Target::CacheUse::bytes)
  bool compiling = false;      // its confined code compiles in a worker (one at a time)

  // How often its code trapped within `window` before `now` (older traps
  // are forgotten here).
  std::size_t recent_traps(Clock::time_point now, Clock::duration window) {
    while (!recent.empty() && now - recent.front() > window) recent.pop_front();
    return recent.size();
  }

  // Bounds, so no key grows what is kept for it without limit.
  static constexpr std::size_t kMaxBanned = 1024;
  static constexpr std::size_t kMaxCounted = 1024;
};

// Records are shared: by the book (for as long as it keeps them), by each
// Link of the key, and by each cached code charged to the key
// (Target::CacheUse), so a record outlives whichever of them goes first.
// The book lets go of a record only when nothing else holds it.
class KeyBook {
 public:
  // The record of the key a HELLO proved, made on first sight; a peer with no
  // key (a Trust::anyone() Receiver) gets a record of its own connection.
  [[nodiscard]] std::shared_ptr<KeyRecord> record_for(const Hello& hello) {
    auto record = std::make_shared<KeyRecord>();
    record->serial = ++serials_;
    if ((hello.flags & kHelloHasKey) == 0) {
      record->name = "a peer without a key";
      return record;
    }
    PublicKey::Bytes bytes{};
    std::memcpy(bytes.data(), hello.key, kKeySize);
    if (const auto it = records_.find(bytes); it != records_.end()) return it->second;
    record->name = "key " + short_key(PublicKey(bytes));
    if (records_.size() >= kMaxKeys) forget_one();
    records_.emplace(bytes, record);
    return record;
  }

 private:
  // The book is bounded: past kMaxKeys, a record that no connection uses
  // and that refuses nothing goes (the first such in key order).
  void forget_one() {
    const auto now = KeyRecord::Clock::now();
    for (auto it = records_.begin(); it != records_.end(); ++it) {
      if (it->second.use_count() == 1 && it->second->refused_until <= now) {
        records_.erase(it);
        return;
      }
    }
  }

  static constexpr std::size_t kMaxKeys = 4096;
  std::map<PublicKey::Bytes, std::shared_ptr<KeyRecord>> records_;
  uint64_t serials_ = 0;
};

}  // namespace threechains::detail
