// Engine, target side: what a trap in confined code costs. The error the
// source is told, the count per code and per key, and the bans and throttles
// that follow.
#include "engine/engine.hpp"

#include <threechains/container.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace threechains::detail {

Error Engine::trap_error(const CachedIfunc& ifunc, CodeId id, const ConfinedTrap& trap,
                         const std::string& peer, Audience audience) const {
  if (trap.reason == TrapReason::gpu_failed && target_->gpu_error) {
    return Error(errc::gpu_failed, target_->gpu_error->context() + " (code " + std::to_string(id) +
                                       " from " + peer + ")");
  }
  std::string text = "ifunc '" + target_->cache.confined_name(ifunc) + "' (code " +
                     std::to_string(id) + ") from " + peer +
                     " trapped: " + std::string(to_string(trap.reason));
  if (trap.address != 0 && audience == Audience::log) {
    char address[32];
    std::snprintf(address, sizeof(address), " (address 0x%llx)",
                  static_cast<unsigned long long>(trap.address));
    text += address;
  }
  return Error(errc::code_trapped, std::move(text));
}

void Engine::count_trap(Link& link, CodeId id, const std::string& name) {
  Target& t = *target_;
  const ReceiverLimits& limits = t.options.limits;
  KeyRecord& key = *link.key;
  count_key_trap(key);
  const auto digest = t.digests.find(id);
  if (digest == t.digests.end()) return;
  const uint32_t limit = limits.max_traps_per_code;
  if (key.traps.size() >= KeyRecord::kMaxCounted && !key.traps.contains(digest->second))
    key.traps.erase(key.traps.begin());  // bounded: the count of some other code starts over
  const uint32_t count = ++key.traps[digest->second];
  if (limit == 0 || count < limit) return;
  if (key.banned.size() < KeyRecord::kMaxBanned) key.banned.insert(digest->second);
  key.traps.erase(digest->second);
  // On every connection of the key, its next frame of it must bring the
  // code, which is refused.
  for (const auto& [ep, other] : links_) {
    if (other->key.get() == &key) other->in.forget_shown(id);
  }
  report(Error(errc::code_refused, "ifunc '" + name + "' (code " + std::to_string(id) +
                                       ") trapped " + std::to_string(count) + " times for " +
                                       key.name + " (last from " + link.peer_name +
                                       "): refused to that key from now on, on every connection "
                                       "(ReceiverLimits::max_traps_per_code)"));
}

void Engine::count_key_trap(KeyRecord& key) {
  const ReceiverLimits& limits = target_->options.limits;
  const auto now = KeyRecord::Clock::now();
  // The key's traps within the window, all code together.
  key.recent.push_back(now);
  if (limits.max_traps_per_key == 0 ||
      key.recent_traps(now, limits.key_trap_window) < limits.max_traps_per_key)
    return;
  key.refused_until = now + limits.key_refusal;
  const std::string why = *key_refused(key);
  // Every connection of the key goes at the next control round, which
  // reports each with the reason.
  for (const auto& [ep, other] : links_) {
    if (other->key.get() == &key && other->misbehaved.empty()) other->misbehaved = why;
  }
  control_pending_ = true;
  key.recent.clear();
}

std::optional<std::string> Engine::key_refused(const KeyRecord& key) const {
  const auto now = KeyRecord::Clock::now();
  if (key.refused_until <= now) return std::nullopt;
  const auto left =
      std::chrono::duration_cast<std::chrono::seconds>(key.refused_until - now).count() + 1;
  return key.name + " is refused for " + std::to_string(left) +
         " s more: its confined code trapped " +
         std::to_string(target_->options.limits.max_traps_per_key) + " times within " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                            target_->options.limits.key_trap_window)
                            .count()) +
         " s (ReceiverLimits::max_traps_per_key, key_refusal)";
}

std::optional<std::string> Engine::key_throttled(KeyRecord& key) const {
  const ReceiverLimits& limits = target_->options.limits;
  const auto now = KeyRecord::Clock::now();
  const std::size_t traps = key.recent_traps(now, limits.key_trap_window);
  if (limits.max_traps_per_key == 0 || traps * 2 < limits.max_traps_per_key) {
    key.last_new_load = now;
    return std::nullopt;
  }
  if (now - key.last_new_load < limits.key_load_interval) {
    return key.name + " is throttled: its confined code trapped " + std::to_string(traps) +
           " times lately, so it may load new code once every " +
           std::to_string(limits.key_load_interval.count()) +
           " ms (ReceiverLimits::max_traps_per_key, key_load_interval)";
  }
  key.last_new_load = now;
  return std::nullopt;
}

// Validates and runs the frame at `frame_bytes` (`available` bytes may hold
// it). Returns false if the frame must wait for its code.

}  // namespace threechains::detail
