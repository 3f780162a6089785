// Engine, target side: frames out of the rings (or Active Messages) into the
// JIT cache, cache misses, credits back to the sources.
#include "engine/engine.hpp"
#include "gpu/gpu_service.hpp"
#include "jit/container_images.hpp"

#include <cstdio>

#include "trust/envelope.hpp"

#include <threechains/container.hpp>

#include <algorithm>
#include <cstring>

namespace threechains::detail {

unsigned Engine::poll() {
  const unsigned dispatched = poll_without_credits();
  return_credits();
  start_due_compiles();
  return dispatched;
}

void Engine::start_due_compiles() {
  if (target_->cache.compiles_in_progress()) [[unlikely]]
    target_->cache.start_due_compiles();
}

unsigned Engine::poll_without_credits() {
  target_->serving_thread = pthread_self();
  // Tiered code finished compiling is switched to here, between dispatches.
  if (target_->cache.compiles_in_progress()) [[unlikely]]
    promote_tiers();
  progress();
  if (rewarm_pending_) [[unlikely]]
    rebuild_polled();
  unsigned dispatched = 0;
  // drain() runs ifuncs, which never touch the link table: polled_ is stable here.
  for (Link* link : polled_) dispatched += drain(*link);
  // Rings idle for a while stop being polled: what a poll costs does not
  // grow with peers that send nothing (the clock is read every 1024 polls).
  if ((++polls_ & 1023) == 0) [[unlikely]]
    cool_idle_rings();
  return dispatched;
}

void Engine::return_credits(CreditTiming timing) {
  for (Link* link : credit_due_) {
    Inbound& in = link->in;
    const uint64_t consumed = in.expected - 1;
    if (in.reported == consumed) continue;
    // NodeOptions::defer_credits: over AM delivery a credit is a message of
    // its own; while frames keep arriving from a rank this Node sends to (its
    // frames there carry the credit in their AM header), wait one poll. The
    // next poll with nothing new from it, half a ring unreported, a send that
    // waits, a flush and close send it at once. Put credits (shared memory)
    // are a store: never deferred.
    if (timing == CreditTiming::may_defer && defer_credits_ && in.by_active_message && link->out &&
        consumed != in.consumed_at_last_look &&
        consumed - in.reported < std::max<uint64_t>(in.slots / 2, 1)) {
      in.consumed_at_last_look = consumed;
      continue;
    }
    in.consumed_at_last_look = consumed;
    return_credit(*link);
  }
  // Those whose credit went out (here, or on a frame of ours) owe no more.
  std::erase_if(credit_due_, [](Link* link) {
    if (link->in.reported != link->in.expected - 1) return false;
    link->in.credit_due = false;
    return true;
  });
}

unsigned Engine::drain(Link& link) {
  Inbound& in = link.in;
  unsigned dispatched = 0;
  for (uint32_t budget = target_->options.dispatch_burst; budget != 0; --budget) {
    std::byte* slot = in.ring->data() + ((in.expected - 1) % in.slots) * in.slot_size;
    const uint64_t commit = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot))
                                .load(std::memory_order_acquire);
    if (commit != in.expected) {
      // Not yet committed, the slot still holds the word of the lap before
      // (0 on the first). Anything else is a source that wrote past its
      // credits or garbage: its ring can no longer be trusted. A source that
      // sends its frames as Active Messages leaves every word at 0.
      const uint64_t previous_lap =
          in.expected > in.slots && !in.by_active_message ? in.expected - in.slots : 0;
      if (commit != previous_lap) [[unlikely]]
        ring_inconsistent(link, "slot " + std::to_string((in.expected - 1) % in.slots) +
                                    " holds commit word " + std::to_string(commit) + " where " +
                                    std::to_string(in.expected) + " (committed) or " +
                                    std::to_string(previous_lap) + " (not yet) was due");
      break;
    }
    if (!dispatch(link, slot + kCommitWordSize, in.slot_size - kCommitWordSize)) break;
    ++in.expected;
    ++dispatched;
  }
  if (dispatched != 0) {
    in.active = true;
    owe_credit(link);
  }
  return dispatched;
}

void Engine::promote_tiers() {
  Target& t = *target_;
  if (!t.compiling.empty()) finish_compiles();
  Promotions done = t.cache.promote_ready();
  t.stats.promotions += done.promoted;
  t.stats.promotion_failures += done.failures.size();
  for (std::string& failure : done.failures) report(Error(errc::jit_failed, std::move(failure)));
}

std::optional<ConfinedTrap> Engine::run_entry(const CachedIfunc& ifunc, CodeId id, int64_t origin,
                                              const char* peer, void* payload, std::size_t size,
                                              uint64_t caller) {
  Target& t = *target_;
  t.cache.count_call(id);
  if (id != t.counted_id || t.counted == nullptr) [[unlikely]]
    (void)ifunc_record(id);
  ++t.counted_calls;
  t.counted_bytes += size;
  // One call in 1024: at 1 in 64 the shm rate fell 12% (the clock reads
  // cost more than their count says), at 1 in 1024 it is within a few
  // percent of no statistics at all (docs/performance.md, "Observability:
  // what watching ifuncs costs").
  const bool timed = (++t.sample_tick & 1023) == 0;
  const auto started =
      timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const DispatchContext outer = t.running;
  t.running = {id, origin, peer, caller};
  std::optional<ConfinedTrap> trap;
  const auto call = [&] {
    if (ifunc.gpu != nullptr) [[unlikely]]
      return run_gpu(ifunc, payload, size);
    return t.cache.invoke(ifunc, payload, size, t.options.target_args, caller);
  };
  if (runtime_hooks_ == nullptr) {  // a plain Receiver: injected code has no Node to call
    trap = call();
  } else {
    const RuntimeHooks* previous = exchange_runtime_hooks(runtime_hooks_);
    trap = call();
    exchange_runtime_hooks(previous);
  }
  t.running = outer;
  // t.counted is still this ifunc's record: ifuncs do not run inside ifuncs
  // (a Node's own sends are dispatched from its loop).
  if (timed) [[unlikely]] {
    t.counted->timed += std::chrono::steady_clock::now() - started;
    ++t.counted->timed_calls;
  }
  if (trap) [[unlikely]] {
    ++t.stats.code_trapped;
    ++t.counted->traps;
  }
  return trap;
}

// A GPU ifunc: its kernel on the payload, then its CPU image's
// <name>_complete on the host. A failure is a trap (TrapReason::gpu_failed)
// whose error trap_error hands on: reported, and sent to the source.
std::optional<ConfinedTrap> Engine::run_gpu(const CachedIfunc& ifunc, void* payload,
                                            std::size_t size) {
  Target& t = *target_;
  std::optional<Error> failed =
      t.gpu->run(*static_cast<const gpu::Service::Kernel*>(ifunc.gpu), static_cast<std::byte*>(payload),
                 size, ifunc.gpu_complete != nullptr);
  if (failed) [[unlikely]] {
    t.gpu_error = std::move(failed);
    return ConfinedTrap{TrapReason::gpu_failed, 0};
  }
  if (ifunc.gpu_complete != nullptr) ifunc.gpu_complete(payload, size, t.options.target_args);
  return std::nullopt;
}

IfuncStats& Engine::ifunc_record(CodeId id) {
  Target& t = *target_;
  if (id == t.counted_id && t.counted != nullptr) [[likely]]
    return *t.counted;
  if (t.counted != nullptr) {  // what the one before had pending, into its record
    t.counted->calls += t.counted_calls;
    t.counted->payload_bytes += t.counted_bytes;
  }
  t.counted_calls = 0;
  t.counted_bytes = 0;
  t.counted = nullptr;
  t.counted_id = 0;
  auto it = t.ifunc_stats.find(id);
  if (it == t.ifunc_stats.end()) {
    // Bounded: beyond what is loaded (itself bounded by ReceiverLimits), 1024
    // records of code loaded before or refused; the least recently counted
    // such goes first (a scan, on this slow path only).
    constexpr std::size_t kKeptBeyondLoaded = 1024;
    if (t.ifunc_stats.size() >= t.cache_use.size() + kKeptBeyondLoaded) {
      auto victim = t.ifunc_stats.end();
      for (auto k = t.ifunc_stats.begin(); k != t.ifunc_stats.end(); ++k) {
        if (t.cache_use.contains(k->first) || k->first == t.running.code_id) continue;
        if (victim == t.ifunc_stats.end() || k->second.last_used < victim->second.last_used)
          victim = k;
      }
      if (victim != t.ifunc_stats.end()) t.ifunc_stats.erase(victim);  // not counted: none is now
    }
    it = t.ifunc_stats.emplace(id, Target::IfuncRecord{.stats = IfuncStats{.code = id}}).first;
    t.sample_tick = 1023;  // the next call is timed: a new ifunc's first (its load made the record)
    if (const auto name = t.names.find(id); name != t.names.end())
      it->second.stats.name = name->second;
  }
  it->second.last_used = ++t.use_clock;
  t.counted_id = id;
  t.counted = &it->second.stats;
  return it->second.stats;
}

// A confined ifunc broke a rule: that invocation ended there. The error
// names it; the source hears it (its next flush or wait throws it); nothing
// else changes: the Receiver serves on, the code stays loaded.
Error Engine::trap_error(const CachedIfunc& ifunc, CodeId id, const ConfinedTrap& trap,
                         const std::string& peer, Audience audience) const {
  if (trap.reason == TrapReason::gpu_failed && target_->gpu_error) {
    return Error(errc::gpu_failed,
                 target_->gpu_error->context() + " (code " + std::to_string(id) + " from " + peer + ")");
  }
  std::string text = "ifunc '" + target_->cache.confined_name(ifunc) + "' (code " +
                     std::to_string(id) + ") from " + peer + " trapped: " +
                     std::string(to_string(trap.reason));
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
  return key.name + " is refused for " + std::to_string(left) + " s more: its confined code trapped " +
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
    return key.name + " is throttled: its confined code trapped " +
           std::to_string(traps) + " times lately, so it may load new code once every " +
           std::to_string(limits.key_load_interval.count()) +
           " ms (ReceiverLimits::max_traps_per_key, key_load_interval)";
  }
  key.last_new_load = now;
  return std::nullopt;
}

// Validates and runs the frame at `frame_bytes` (`available` bytes may hold
// it). Returns false if the frame must wait for its code.
bool Engine::dispatch(Link& link, std::byte* frame_bytes, std::size_t available) {
  Target& t = *target_;
  Inbound& in = link.in;
  const std::span<const std::byte> bytes(frame_bytes, available);
  FrameView frame;
  errc e = FrameView::parse(bytes, frame);
  if (e == errc::ok && frame.sequence() != static_cast<uint32_t>(in.expected))
    e = errc::bad_sequence;
  if (e != errc::ok) [[unlikely]] {
    ++t.stats.frames_rejected;
    report(Error(e, e == errc::bad_sequence
                        ? "frame from " + link.peer_name + " rejected: sequence " +
                              std::to_string(frame.sequence()) + " where " +
                              std::to_string(in.expected) + " was due"
                        : FrameView::describe(e, bytes)));
    return true;
  }
  const CachedIfunc* entry =
      in.has_shown(frame.code_id()) ? t.cache.find_ifunc(frame.code_id()) : nullptr;
  if (entry == nullptr) [[unlikely]] {
    if (!frame.has_code()) return request_code(link, frame);
    const Loaded loaded = load(link, frame.code_id(), frame.codec(), frame.code());
    if (loaded.compiling) [[unlikely]] {
      // Its code compiles in a worker: the frame waits in its slot, as for
      // a cache miss (finish_compiles settles it).
      in.stalled_on = in.expected;
      in.stalled_code = frame.code_id();
      return false;
    }
    entry = loaded.entry;
    if (entry == nullptr) {
      ++t.stats.frames_rejected;
      return true;  // reported by load()
    }
  }
  if (frame.code_id() != t.last_dispatched) [[unlikely]]
    touch(frame.code_id());
  in.stalled_on = 0;
  if (const std::optional<ConfinedTrap> trap =
          run_entry(*entry, frame.code_id(), link.rank, link.peer_name.c_str(),
                    frame_bytes + sizeof(FrameHeader), frame.header().payload_size,
                    link.caller)) [[unlikely]] {
    report(trap_error(*entry, frame.code_id(), *trap, link.peer_name));
    send_code_refusal(link, frame.code_id(),
                      trap_error(*entry, frame.code_id(), *trap, link.peer_name, Audience::source));
    count_trap(link, frame.code_id(), entry->gpu != nullptr ? t.names[frame.code_id()]
                                                             : t.cache.confined_name(*entry));
  }
  ++t.stats.frames_dispatched;
  return true;
}

std::byte* Engine::aligned_scratch(std::size_t length) {
  std::vector<Target::ScratchBlock>& scratch = target_->scratch;
  if (scratch.size() * sizeof(Target::ScratchBlock) < length + sizeof(Target::ScratchBlock))
    scratch.resize(length / sizeof(Target::ScratchBlock) + 2);
  // header at +8, so the payload (+24 from the frame) lands 16-byte aligned
  return reinterpret_cast<std::byte*>(scratch.data()) + 8;
}

// AM delivery: one frame, in UCX's receive buffer. The ifunc gets its payload
// 16-byte aligned, as from a ring slot, so a misaligned buffer is copied first.
void Engine::dispatch_delivered(Link& link, uint64_t sequence, std::byte* data,
                                std::size_t length) {
  Inbound& in = link.in;
  if (!link.misbehaved.empty()) [[unlikely]]
    return;  // refused at the next control round; nothing more of it runs
  // `sequence` (the commit word, which travels in front of the frame) must
  // be the next one due: frames arrive in order.
  if (sequence != in.expected + in.backlog.size()) [[unlikely]] {
    ring_inconsistent(link, "a frame arrived as number " + std::to_string(sequence) + " where " +
                                std::to_string(in.expected + in.backlog.size()) + " was due");
    return;
  }
  if (!in.backlog.empty()) [[unlikely]] {
    // More frames than the ring it was granted: the source ignored its
    // credits. Nothing more from it is kept; the control round refuses it.
    if (in.backlog.size() >= in.slots) {
      link.misbehaved = "it sent more frames than its ring holds, ignoring its credits";
      control_pending_ = true;
      return;
    }
    in.backlog.emplace_back(data, data + length);
    return;
  }
  std::byte* frame = data;
  if ((reinterpret_cast<uintptr_t>(data + sizeof(FrameHeader)) & 15) != 0) {
    frame = aligned_scratch(length);
    std::memcpy(frame, data, length);
  }
  if (dispatch(link, frame, length)) {
    ++in.expected;
    owe_credit(link);
  } else {
    in.backlog.emplace_back(data, data + length);
  }
}

// The peer's ring state went inconsistent (a commit word or sequence no
// honest source writes): nothing more of it is read, and the next control
// round disconnects that one peer with the reason. Other peers go on.
void Engine::ring_inconsistent(Link& link, std::string what) {
  if (!link.misbehaved.empty()) return;
  link.misbehaved = "its ring went inconsistent: " + std::move(what);
  control_pending_ = true;
}

// AM delivery: runs what waited behind a cache miss, in order, once code came.
void Engine::drain_backlog(Link& link) {
  Inbound& in = link.in;
  while (!in.backlog.empty()) {
    const std::vector<std::byte>& head = in.backlog.front();
    std::byte* frame = aligned_scratch(head.size());
    std::memcpy(frame, head.data(), head.size());
    if (!dispatch(link, frame, head.size())) return;
    in.backlog.pop_front();
    ++in.expected;
    owe_credit(link);
  }
}

Engine::Loaded Engine::load(Link& link, CodeId id, CodecId codec,
                            std::span<const std::byte> code) {
  Target& t = *target_;
  // Waiting for this code's compile, or for the one its key has running
  // (one at a time, so no key fills the worker's queue; code of the key's
  // that is loaded already waits too): asked again each poll, so before
  // anything that costs (a copy, a digest, a signature check).
  const auto waits = [&] { return t.compiling.contains(id) || link.key->compiling; };
  if (waits() && (!drop_abandoned_compiles() || waits())) [[unlikely]]
    return {nullptr, true};
  // The code may sit in the peer's ring, which the peer can still write: the
  // digest, the signature check, the identity check and the load all read
  // one private copy, so what was verified is what is loaded.
  const std::vector<std::byte> private_code(code.begin(), code.end());
  code = private_code;
  try {
    if (code.size() > t.options.limits.max_code_bytes) {
      throw Error(errc::limit_exceeded,
                  "code of " + std::to_string(code.size()) + " bytes, over the " +
                      std::to_string(t.options.limits.max_code_bytes) +
                      " this Receiver accepts (ReceiverLimits::max_code_bytes)");
    }
    if (const std::optional<std::string> why = key_refused(*link.key))
      throw Error(errc::code_refused, *why);
    const ContentDigest digest = content_digest(code);
    if (link.key->banned.contains(digest)) {
      throw Error(errc::code_refused,
                  "this code trapped " + std::to_string(t.options.limits.max_traps_per_code) +
                      " times here for " + link.key->name +
                      " (or its compile failed) and is refused to it "
                      "(ReceiverLimits::max_traps_per_code)");
    }
    if (const auto known = t.digests.find(id); known != t.digests.end()) {
      // Loaded already, for another peer (or for this one before): the same
      // code runs from the cache; other code under its identity never does.
      if (known->second != digest) {
        throw Error(errc::code_refused,
                    "its code identity " + std::to_string(id) +
                        " names other code here (identities are a shorthand; code is "
                        "known by its BLAKE2b-256)");
      }
      if (const CachedIfunc* entry = t.cache.find_ifunc(id)) {
        link.in.shown.insert(id);
        return {entry, false};
      }
    } else if (t.cache.contains(id)) {
      throw Error(errc::code_refused,
                  "its code identity " + std::to_string(id) +
                      " is taken by code this process loaded into Receiver::cache() itself");
    }
    // Before anything parses it: whose code is this, and is it intact?
    const Confine confine = check_code_trust(t.options.trust, code);
    std::optional<LoadResult> result;
    if (confine == Confine::yes) {
      if (const std::optional<std::string> why = key_throttled(*link.key))
        throw Error(errc::code_refused, *why);
      if (t.options.gpu) refuse_confined_gpu(code);
      // What the key holds already, before a worker is started for more.
      if (link.key->code_bytes + code.size() > t.options.limits.max_code_bytes_per_key) {
        throw Error(errc::limit_exceeded,
                    link.key->name + " holds " + std::to_string(link.key->code_bytes) +
                        " bytes of code here already: " + std::to_string(code.size()) +
                        " more would pass the " +
                        std::to_string(t.options.limits.max_code_bytes_per_key) +
                        " a key may (ReceiverLimits::max_code_bytes_per_key)");
      }
      // Compiled in a worker process while this thread serves on.
      result = t.cache.start_load(id, codec, code, confine);
      if (!result) {
        link.key->compiling = true;
        t.compiling.emplace(
            id, Target::Compiling{digest, link.key, links_.at(link.endpoint.handle()), code.size(),
                                  keep_code_ ? std::vector<std::byte>(code.begin(), code.end())
                                             : std::vector<std::byte>{}});
        return {nullptr, true};
      }
    } else {
      result = t.options.gpu ? load_with_gpu(id, codec, code, confine)
                             : t.cache.load(id, codec, code, confine);
    }
    link.in.shown.insert(id);
    return {admit_loaded(link.key, id, digest, *result, code.size(),
                         keep_code_ ? std::vector<std::byte>(code.begin(), code.end())
                                    : std::vector<std::byte>{},
                         confine),
            false};
  } catch (const Error& error) {
    refuse_load(&link, id, error);
    return {nullptr, false};
  }
}

const CachedIfunc* Engine::admit_loaded(const std::shared_ptr<KeyRecord>& charged, CodeId id, const ContentDigest& digest,
                                        const LoadResult& result, std::size_t code_bytes,
                                        std::vector<std::byte> kept_container, Confine confine) {
  Target& t = *target_;
  t.digests.insert_or_assign(id, digest);
  t.names.insert_or_assign(id, result.name);
  ifunc_record(id).name = result.name;
  // Charged to the key that loaded it (a new entry: code loaded already
  // returned before): its container, and what it holds.
  const std::size_t bytes = code_bytes + t.cache.committed_bytes(id);
  note_loaded(id, bytes);
  t.cache_use[id].charged = charged;
  KeyRecord& key = *charged;
  key.code_bytes += bytes;
  if (key.code_bytes > t.options.limits.max_code_bytes_per_key) {
    const std::size_t held = key.code_bytes - bytes;
    forget(id);
    throw Error(errc::limit_exceeded,
                "its code would hold " + std::to_string(bytes) + " bytes here (container and " +
                    "globals), and " + key.name + " holds " + std::to_string(held) +
                    " already: over the " +
                    std::to_string(t.options.limits.max_code_bytes_per_key) +
                    " a key may (ReceiverLimits::max_code_bytes_per_key)");
  }
  trim_cache(id);  // after a load that worked: bad code never costs good code its place
  if (keep_code_) {
    // Kept for injected code that sends it onward; parsed again only if it does.
    t.code_by_name[result.name] = id;
    t.code_store.insert_or_assign(id,
                                  Target::StoredCode{std::move(kept_container), std::nullopt, confine});
  }
  count_load(result);
  return t.cache.find_ifunc(id);
}

void Engine::refuse_load(Link* link, CodeId id, const Error& error) {
  Target& t = *target_;
  if (error.is(errc::code_refused) || error.is(errc::import_refused) ||
      error.is(errc::limit_exceeded)) {
    ++t.stats.code_refused;
    ++ifunc_record(id).refusals;
  }
  report(Error(static_cast<errc>(error.code().category() == threechains_category()
                                     ? error.code().value()
                                     : static_cast<int>(errc::jit_failed)),
               "code from " + (link != nullptr ? link->peer_name : std::string("a peer gone")) +
                   ": " + error.context()));
  if (link != nullptr) send_code_refusal(*link, id, error);
}

void Engine::finish_compiles() {
  Target& t = *target_;
  for (JitCache::FinishedLoad& done : t.cache.finish_loads()) {
    const auto it = t.compiling.find(done.id);
    if (it == t.compiling.end()) continue;
    Target::Compiling compiling = std::move(it->second);
    t.compiling.erase(it);
    compiling.key->compiling = false;
    const std::shared_ptr<Link> link = compiling.link.lock();
    Link* source = link && !link->removed ? link.get() : nullptr;
    bool loaded = false;
    if (done.result) {
      try {
        (void)admit_loaded(compiling.key, done.id, compiling.digest, *done.result,
                           compiling.code_bytes, std::move(compiling.container), Confine::yes);
        if (source != nullptr) source->in.shown.insert(done.id);
        loaded = true;
      } catch (const Error& error) {
        refuse_load(source, done.id, error);
      }
    } else {
      const Error& error = *done.error;
      // The worker refused it, crashed on it, or ran out of time or memory
      // on it: that depends on the content alone, so it is refused to the
      // key from now on (no worker is started for it again), and counts as
      // one of the key's traps. A worker that could not run at all is the
      // target's failure, not the code's.
      if (!done.target_failed) {
        if (compiling.key->banned.size() < KeyRecord::kMaxBanned)
          compiling.key->banned.insert(compiling.digest);
        count_key_trap(*compiling.key);
      }
      refuse_load(source, done.id, error);
    }
    // Every frame that waited for this code looks again: the one that
    // brought it runs now, or is dropped with it; others (another
    // connection's copy) load it themselves. So do the frames of the key
    // that waited for this compile to end (one per key at a time), a code
    // reply that came meanwhile included: they ask for it again.
    for (const auto& [ep, waiting] : links_) {
      Inbound& in = waiting->in;
      if (in.stalled_on == 0) continue;
      if (in.stalled_code == done.id && !loaded && waiting.get() == source) {
        ++t.stats.frames_rejected;
        skip_stalled(*waiting);
      } else if (in.stalled_code == done.id || waiting->key == compiling.key) {
        in.stalled_on = 0;
      }
    }
    control_pending_ = true;  // frames delivered by AM wait in backlogs, drained there
  }
}

// Compiles the cache no longer runs (the application cleared it): their
// keys may compile again, and the frames that waited look again. True if
// there were any.
bool Engine::drop_abandoned_compiles() {
  Target& t = *target_;
  bool dropped = false;
  for (auto it = t.compiling.begin(); it != t.compiling.end();) {
    if (t.cache.loading(it->first)) {
      ++it;
      continue;
    }
    it->second.key->compiling = false;
    for (const auto& [ep, waiting] : links_) {
      if (waiting->in.stalled_on != 0 && waiting->in.stalled_code == it->first)
        waiting->in.stalled_on = 0;
    }
    it = t.compiling.erase(it);
    dropped = true;
  }
  if (dropped) control_pending_ = true;  // frames delivered by AM wait in backlogs
  return dropped;
}

void Engine::refuse_confined_gpu(std::span<const std::byte> code) {
  for (const ParsedImage& image : parse_container(code)) {
    if (!is_gpu_triple(image.triple)) continue;
    throw Error(errc::code_refused,
                "ifunc '" + image.name +
                    "' is GPU code from a signer this target does not fully trust: GPU code "
                    "cannot be confined (it reaches all of the GPU's memory); trust the signer "
                    "with Trust::allow_native_code_signer");
  }
}

// A Receiver with ReceiverOptions::gpu: a container with a GPU image runs its
// kernel there (and its CPU image, if it has one for this host, is loaded
// for <name>_complete); any other goes to the JIT cache as ever.
LoadResult Engine::load_with_gpu(CodeId id, CodecId codec, std::span<const std::byte> code,
                                 Confine confine) {
  Target& t = *target_;
  if (code_identity(code) != id) return t.cache.load(id, codec, code, confine);  // it says why
  const std::vector<ParsedImage> images = parse_container(code);
  const ParsedImage* gpu_image = nullptr;
  bool cpu_images = false;
  for (const ParsedImage& image : images) {
    if (!is_gpu_triple(image.triple)) {
      cpu_images = true;
    } else if (gpu_image == nullptr) {
      gpu_image = &image;
    }
  }
  if (gpu_image == nullptr) return t.cache.load(id, codec, code, confine);
  if (confine == Confine::yes) refuse_confined_gpu(code);
  if (!t.gpu) {
    throw Error(errc::gpu_failed, "ifunc '" + gpu_image->name +
                                      "' is GPU code and this Receiver has no GPU: " +
                                      t.gpu_unavailable);
  }
  const auto started = std::chrono::steady_clock::now();
  LoadResult result;
  bool cpu_loaded = false;
  if (cpu_images) {
    try {
      result = t.cache.load(id, codec, code, Confine::no);
      cpu_loaded = true;
    } catch (const Error& error) {
      // CPU images for other hosts only: the kernel runs without a host part.
      if (!error.is(errc::no_image_for_target)) throw;
    }
  }
  bool gpu_loaded = false;
  try {
    const gpu::Service::Loaded kernel = t.gpu->load(id, *gpu_image);
    gpu_loaded = true;
    const auto complete =
        cpu_loaded ? reinterpret_cast<IfuncMain>(t.cache.lookup(id, gpu_image->name + "_complete"))
                   : nullptr;
    t.cache.adopt_gpu(id, kernel.kernel, complete);
  } catch (...) {
    if (gpu_loaded) t.gpu->unload(id);
    if (cpu_loaded) (void)t.cache.evict(id);
    throw;
  }
  result.name = gpu_image->name;
  result.triple = gpu_image->triple;
  result.tier = 1;
  result.compile_time = std::chrono::steady_clock::now() - started;
  return result;
}

void Engine::count_load(const LoadResult& result) noexcept {
  ReceiverStats& stats = target_->stats;
  ++stats.code_loads;
  stats.last_load_time = result.compile_time;
  stats.last_load_tier = result.tier;
  stats.total_load_time += result.compile_time;
}

void Engine::note_loaded(CodeId id, std::size_t bytes) {
  Target& t = *target_;
  Target::CacheUse& use = t.cache_use[id];
  t.cached_code_bytes += bytes - use.bytes;
  use.bytes = bytes;
  use.last_use = ++t.use_clock;
}

void Engine::touch(CodeId id) noexcept {
  Target& t = *target_;
  t.last_dispatched = id;
  const auto it = t.cache_use.find(id);
  if (it != t.cache_use.end()) it->second.last_use = ++t.use_clock;
}

void Engine::trim_cache(CodeId keep) {
  Target& t = *target_;
  const ReceiverLimits& limits = t.options.limits;
  while (t.cache_use.size() > limits.max_cached_ifuncs ||
         t.cached_code_bytes > limits.max_cached_code_bytes) {
    // The least recently used; never the one just loaded, nor the one running
    // now (its code is on the stack).
    auto victim = t.cache_use.end();
    for (auto it = t.cache_use.begin(); it != t.cache_use.end(); ++it) {
      if (it->first == keep || (it->first == t.running.code_id && t.running.code_id != 0)) continue;
      if (victim == t.cache_use.end() || it->second.last_use < victim->second.last_use) victim = it;
    }
    if (victim == t.cache_use.end()) return;  // only those two: they stay
    forget(victim->first);
    ++t.stats.evictions;
  }
}

void Engine::forget(CodeId id) {
  Target& t = *target_;
  try {
    (void)t.cache.evict(id);
  } catch (const Error& error) {  // LLVM could not free it: forgotten all the same
    report(error);
  }
  if (t.gpu) t.gpu->unload(id);
  if (const auto it = t.cache_use.find(id); it != t.cache_use.end()) {
    t.cached_code_bytes -= it->second.bytes;
    if (it->second.charged) it->second.charged->code_bytes -= it->second.bytes;
    t.cache_use.erase(it);
  }
  t.code_store.erase(id);
  t.digests.erase(id);
  t.names.erase(id);
  // Whoever showed it must show it again: the next code under this identity
  // may be another's.
  for (const auto& [ep, link] : links_) link->in.forget_shown(id);
  std::erase_if(t.code_by_name, [id](const auto& entry) { return entry.second == id; });
  if (t.last_dispatched == id) t.last_dispatched = 0;
}

void Engine::install(const Ifunc& ifunc, Confine confine) {
  Target& t = *target_;
  if (t.cache.contains(ifunc.id()) && t.code_store.contains(ifunc.id())) return;
  if (!t.cache.contains(ifunc.id())) {
    const LoadResult result = t.options.gpu
                                  ? load_with_gpu(ifunc.id(), ifunc.codec(), ifunc.code(), confine)
                                  : t.cache.load(ifunc.id(), ifunc.codec(), ifunc.code(), confine);
    t.digests.insert_or_assign(ifunc.id(), content_digest(ifunc.code()));
    t.names.insert_or_assign(ifunc.id(), ifunc.name());
    ifunc_record(ifunc.id()).name = ifunc.name();
    note_loaded(ifunc.id(), ifunc.code().size());
    trim_cache(ifunc.id());
    count_load(result);
  }
  t.code_by_name[ifunc.name()] = ifunc.id();
  t.code_store.insert_or_assign(ifunc.id(), Target::StoredCode{{}, ifunc, confine});
}

Confine Engine::confinement_of(CodeId id) const {
  const auto it = target_->code_store.find(id);
  return it == target_->code_store.end() ? Confine::yes : it->second.confine;
}

const Ifunc* Engine::stored(CodeId id) {
  const auto it = target_->code_store.find(id);
  if (it == target_->code_store.end()) return nullptr;
  Target::StoredCode& code = it->second;
  if (!code.ifunc) code.ifunc.emplace(Ifunc::from_container(std::move(code.container)));
  return &*code.ifunc;
}

const Ifunc* Engine::stored(const std::string& name) {
  const auto it = target_->code_by_name.find(name);
  return it == target_->code_by_name.end() ? nullptr : stored(it->second);
}

// A cached frame for code this target does not hold: ask its source once and
// leave the frame in its slot (the source cannot overwrite it: no credit).
bool Engine::request_code(Link& link, const FrameView& frame) {
  Inbound& in = link.in;
  if (in.stalled_on == in.expected) return false;
  in.stalled_on = in.expected;
  in.stalled_code = frame.code_id();
  ++target_->stats.cache_misses;
  try {
    outbox_.send(link.endpoint, kAmNeedCode, NeedCode{in.expected, frame.code_id()}, {});
  } catch (const Error&) {  // the source went away: noticed as lost
  }
  return false;
}

void Engine::accept_code(Link& link, Inbound::CodeArrival& arrival) {
  if (!target_) return;
  Inbound& in = link.in;
  // An answer about other code (a late one, or one nobody asked for) leaves
  // the stalled frame alone.
  const bool settles_stall = in.stalled_on != 0 && arrival.header.code_id == in.stalled_code;
  if (arrival.header.found == 0) {
    // The source cannot supply the code: the stalled frame can never run.
    if (settles_stall) {
      ++target_->stats.frames_rejected;
      report(Error(errc::unknown_code,
                   "frame " + std::to_string(in.stalled_on) + " from " + link.peer_name +
                       " dropped: its source no longer holds the code it names"));
      skip_stalled(link);
    }
    return;
  }
  if (in.has_shown(arrival.header.code_id) && target_->cache.contains(arrival.header.code_id))
    return;
  if (arrival.too_large != 0) {
    const Error error(errc::limit_exceeded,
                      "code of " + std::to_string(arrival.too_large) + " bytes from " +
                          link.peer_name + ", over the " +
                          std::to_string(target_->options.limits.max_code_bytes) +
                          " this Receiver accepts (ReceiverLimits::max_code_bytes)");
    ++target_->stats.code_refused;
    ++ifunc_record(arrival.header.code_id).refusals;
    report(error);
    send_code_refusal(link, arrival.header.code_id, error);
    if (settles_stall) {
      ++target_->stats.frames_rejected;
      skip_stalled(link);
    }
    return;
  }
  const Loaded loaded = load(link, arrival.header.code_id,
                            static_cast<CodecId>(arrival.header.codec), arrival.code);
  if (loaded.compiling) return;  // the frame stays stalled; finish_compiles settles it
  if (loaded.entry != nullptr) {
    // Loaded: if the stalled frame misses again (another link's code evicted
    // this meanwhile), it asks again instead of waiting for an answer given.
    if (settles_stall) in.stalled_on = 0;
    return;
  }
  if (settles_stall) {
    ++target_->stats.frames_rejected;
    skip_stalled(link);  // the code is bad; the frame waiting for it cannot run
  }
}

void Engine::skip_stalled(Link& link) {
  Inbound& in = link.in;
  if (in.stalled_on == in.expected) {
    ++in.expected;
    owe_credit(link);
    if (!in.backlog.empty()) in.backlog.pop_front();  // AM delivery: the frame itself
  }
  in.stalled_on = 0;
}

void Engine::return_credit(Link& link) {
  if (link.removed) return;  // its endpoint is closing
  Inbound& in = link.in;
  if (in.credit_request.reap() == UCS_INPROGRESS) return;  // one credit in flight at a time
  const bool stored = !in.by_active_message && !in.credit;  // the credit line, not a message
  // A code refusal went out first: the credit must not overtake it. A stored
  // credit waits until that refusal's send completed (it is then in the
  // source's queue); a message or a put is fenced behind it.
  if (in.fence_before_credit && stored && !in.refusal_in_flight.expired()) return;
  in.credit_value = in.expected - 1;
  try {
    if (in.fence_before_credit) {
      if (!stored) worker_.fence();
      in.fence_before_credit = false;
    }
    if (in.by_active_message) {
      // Where RMA is emulated (tcp) an AM back is cheaper than a put.
      in.credit_request =
          link.endpoint.am_send(kAmCredit, &in.credit_value, sizeof(uint64_t), nullptr, 0);
    } else if (!stored) {
      in.credit_request = link.endpoint.put(&in.credit_value, sizeof(uint64_t),
                                            in.credit->address(), in.credit->rkey());
    } else {
      // The source maps the ring: it reads the credit where we store it, and
      // beside it how many refusals we sent, so that its flush waits for them.
      std::atomic_ref<uint64_t>(in.credit_line[kCreditLineRefusals])
          .store(in.refusals_sent, std::memory_order_relaxed);
      std::atomic_ref<uint64_t>(*in.credit_line).store(in.credit_value, std::memory_order_release);
    }
    in.reported = in.credit_value;
  } catch (const Error&) {
    control_pending_ = true;  // the source is unreachable: noticed as lost by the control round
  }
}

// AM delivery: the frame runs right here, inside UCX's progress, with no copy
// unless its payload would be misaligned or it must wait for its code.
ucs_status_t Engine::on_frame(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  if (link == nullptr || !link->receiving() || length < kCommitWordSize ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) [[unlikely]]
    return UCS_OK;
  try {
    if (!link->in.by_active_message) [[unlikely]] {
      // Its first frame by AM: a source delivers one way only, so a ring it
      // already wrote frames into means its state went wrong.
      if (link->in.expected != 1) {
        self->ring_inconsistent(*link, "a frame came as an Active Message after " +
                                           std::to_string(link->in.expected - 1) +
                                           " written into the ring");
        return UCS_OK;
      }
      link->in.by_active_message = true;
      self->rewarm_pending_ = true;  // frames by message: the ring is not polled
    }
    // Both directions open: the frame carries what the peer consumed of ours.
    if (header_length == sizeof(uint64_t) && link->out && link->out->credit_is_local()) {
      uint64_t consumed;
      std::memcpy(&consumed, header, sizeof(consumed));
      link->out->take_credit(consumed);
    }
    // Data: | sequence (8 B) | frame |, like a ring slot.
    uint64_t sequence;
    std::memcpy(&sequence, data, sizeof(sequence));
    self->dispatch_delivered(*link, sequence, static_cast<std::byte*>(data) + kCommitWordSize,
                             length - kCommitWordSize);
  } catch (...) {  // never let an exception cross UCX's C frames
    self->report(Error(errc::jit_failed,
                       "frame from " + link->peer_name + ": dispatch failed with an exception"));
  }
  return UCS_OK;
}

}  // namespace threechains::detail
