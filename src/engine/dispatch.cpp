// Engine, target side: frames out of the rings (or Active Messages) to the
// ifuncs they call, and credits back to the sources. Loading code a frame
// needs is in code_loading.cpp, what traps cost in traps.cpp.
#include "confine/window_tier.hpp"
#include "engine/engine.hpp"
#include "gpu/gpu_service.hpp"

#include <threechains/container.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>
#include <utility>

namespace threechains::detail {
namespace {

// The most frames of a run the window tier takes into its window at once
// (WindowedCode::kMostAtOnce: what one way in takes), and the fewest it
// waits for before the next hand-back of credit where the ring holds twice
// as many (docs/performance.md, "Runs of frames in one window entry").
constexpr uint32_t kWindowFramesAtOnce = 32;
constexpr uint32_t kWindowRunAtLeast = 8;
static_assert(kWindowFramesAtOnce == confined::WindowedCode::kMostAtOnce);
static_assert(std::tuple_size_v<decltype(Target::window_run)> == kWindowFramesAtOnce);

// The source maps the ring: it reads the credit where we store it, and beside
// it how many refusals we sent, so that its flush waits for them.
void store_credit(Inbound& in) noexcept {
  in.credit_value = in.expected - 1;
  std::atomic_ref<uint64_t>(in.credit_line[kCreditLineRefusals])
      .store(in.refusals_sent, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(*in.credit_line).store(in.credit_value, std::memory_order_release);
  in.reported = in.credit_value;
}

}  // namespace

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
  // Tiered code finished compiling is switched to here, between dispatches;
  // so is large code whose checks finished aside.
  if (target_->cache.compiles_in_progress() || !target_->vetting_waits.empty()) [[unlikely]]
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
  Target& t = *target_;
  Inbound& in = link.in;
  unsigned dispatched = 0;
  // Where the credit is a store the source reads in place (shared memory),
  // each quarter ring consumed is handed back at once: the source refills
  // those slots while the rest run, so the two sides overlap instead of
  // taking turns by the burst.
  const bool stored_credit = in.credit_line != nullptr && !in.by_active_message &&
                             !in.credit.has_value() && !in.fence_before_credit;
  const uint32_t credit_every = std::max<uint32_t>(in.slots / 4, 1);
  uint32_t since_credit = 0;
  // A run of frames that name the code that ran last (start_run, looked at
  // once a drain and after each frame that took the full path). The context
  // it runs in (t.running) is set once for the run, and put back before
  // anything else is dispatched or a trap is answered, and when the drain
  // ends.
  CodeRun run;
  bool may_start_run = true;
  struct PutBack {
    DispatchContext& running;
    const DispatchContext outer;
    ~PutBack() { running = outer; }
  } put_back{t.running, t.running};
  const std::size_t available = in.slot_size - kCommitWordSize;
  std::byte* const ring = in.ring->data();
  uint64_t index = (in.expected - 1) % in.slots;  // one division a drain, not one a frame
  for (uint32_t budget = t.options.dispatch_burst; budget != 0;) {
    std::byte* slot = ring + index * in.slot_size;
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
        ring_inconsistent(link, "slot " + std::to_string(index) +
                                    " holds commit word " + std::to_string(commit) + " where " +
                                    std::to_string(in.expected) + " (committed) or " +
                                    std::to_string(previous_lap) + " (not yet) was due");
      break;
    }
    std::byte* frame = slot + kCommitWordSize;
    if (may_start_run) [[unlikely]] {
      may_start_run = false;
      run = start_run(link, frame, available);
      if (run.entry != nullptr) t.running = run.context;
    }
    // The peer may be refused meanwhile (a trap that refuses its key): none
    // of its frames after that one runs (the control round closes it).
    bool refused = false;
    std::optional<ConfinedTrap> trap;
    uint32_t took = 1;  // the frames this step consumed
    bool handled = false;
    if (run.entry != nullptr) {
      if (run.windowed) {
        // To the next quarter's hand-back of credit, so that the source
        // refills the quarter before while these run, but kWindowRunAtLeast
        // frames at least (half the ring, on rings under 16 slots): the
        // entry costs as much as a few calls. Runs of 8 were the fastest on
        // a 16-slot ring, of a quarter (16) on a 64-slot one; of the whole
        // ring, slower (docs/performance.md, "Runs of frames in one window
        // entry"). Never more than the ring holds (a source rewriting a
        // slot between two header reads would alias two frames). A trap's
        // refusal may set fence_before_credit mid-drain, after which
        // since_credit passes credit_every unreset (helper-21).
        const uint32_t at_least =
            std::min<uint32_t>(kWindowRunAtLeast, std::max<uint32_t>(in.slots / 2, 1));
        const uint32_t to_credit =
            stored_credit && since_credit < credit_every ? credit_every - since_credit : budget;
        took = run_window_frames(link, run, index,
                                 std::min({budget, std::max(to_credit, at_least), in.slots}), trap);
        handled = took != 0;
      } else {
        // A call that is not a direct one (confined code, or a Node's
        // hooks) runs too many instructions for the CPU to reach the next
        // slot's load past it, and that load is a miss (the source wrote the
        // line): asked for now, it arrives while this frame runs. The
        // window tier's shm rate, same session, A/B: 22.7-23.5 M/s without,
        // 34.0-36.1 M/s with (docs/performance.md, "The window tier against
        // the checked tier"). A direct call is short enough already (no gain
        // measured).
        if (run.direct == nullptr)
          __builtin_prefetch(ring + (index + 1 == in.slots ? 0 : index + 1) * in.slot_size);
        handled = run_next(link, run, frame, trap);
      }
    }
    if (handled) [[likely]] {
      if (trap) [[unlikely]] {
        t.running = put_back.outer;
        const CodeRun ran = std::exchange(run, {});  // the code or its key may be refused now
        answer_trap(link, *ran.entry, ran.id, *trap);
        refused = !link.misbehaved.empty();
      }
    } else {
      took = 1;
      t.running = put_back.outer;
      if (!dispatch(link, frame, available)) break;
      run = {};
      may_start_run = true;
      refused = !link.misbehaved.empty();
      index = (in.expected - 1) % in.slots;  // as the old loop would: in step with `expected`
    }
    for (uint32_t k = 0; k < took; ++k) {
      ++in.expected;
      ++dispatched;
      if (++index == in.slots) index = 0;
      if (stored_credit && ++since_credit == credit_every && !in.fence_before_credit) {
        since_credit = 0;
        store_credit(in);
      }
    }
    budget -= took;
    if (refused) [[unlikely]]
      break;
  }
  if (dispatched != 0) {
    in.active = true;
    owe_credit(link);
  }
  return dispatched;
}

// A frame that names the code that ran last (in this ring or another),
// after dispatch() settled for that one what holds for a run of them: the
// cache lookup and what this peer has shown, the code's place in the cache,
// its statistics' record, the context it runs in. Each frame's own header
// is still checked in full (nothing of the ring is trusted from one frame to
// the next); what is left is the call and its counts: about a third of the
// instructions a frame (callgrind: docs/performance.md, "Past 2x").
Engine::CodeRun Engine::start_run(Link& link, const std::byte* frame,
                                  std::size_t available) noexcept {
  Target& t = *target_;
  // Frames of other code (or none ran yet) go the full way at once. A slot
  // holds a header at least (checked_slot_size, the Receiver's grant).
  CodeId named;
  std::memcpy(&named, frame + offsetof(FrameHeader, code_id), sizeof(named));
  if (named == 0 || named != t.last_dispatched || link.in.stalled_on != 0) return {};
  // Everything below reads this one copy: the peer may rewrite its slot.
  FrameView view;
  if (FrameView::parse({frame, available}, view) != errc::ok || view.has_code()) return {};
  const CodeId id = view.code_id();
  // Still shown by this peer and cached (a ban or an eviction since takes
  // either away), and counted: t.counted is this code's statistics record.
  if (id != named || id != t.counted_id || t.counted == nullptr || !link.in.has_shown(id))
    return {};
  const CachedIfunc* entry = t.cache.find_ifunc(id);
  if (entry == nullptr || entry->gpu != nullptr) return {};
  CodeRun run;
  run.entry = entry;
  run.id = id;
  run.first = FrameHeader::first_word(view.header().codec, 0);
  run.max_sizes = available - sizeof(FrameHeader);
  run.context = {id, link.rank, link.peer_name.c_str(), link.caller};
  if (entry->confined == nullptr && runtime_hooks_ == nullptr) run.direct = entry->main;
  run.windowed = t.cache.in_window(*entry);
  return run;
}

[[gnu::always_inline]] inline bool Engine::continues_run(const CodeRun& run, const std::byte* frame,
                                                         uint64_t sequence, uint64_t tick,
                                                         uint32_t& payload_size) noexcept {
  // The first word: magic, version and codec as checked when the run began,
  // and this frame's sequence. The sizes' word: a payload within the slot
  // and no code (code_size, its high half, 0). Each read once, into locals:
  // the peer may rewrite its slot.
  const uint64_t due = run.first | FrameHeader::first_word(0, static_cast<uint32_t>(sequence));
  uint64_t first;
  uint64_t sizes;
  CodeId id;
  std::memcpy(&first, frame, sizeof(first));
  std::memcpy(&sizes, frame + offsetof(FrameHeader, payload_size), sizeof(sizes));
  std::memcpy(&id, frame + offsetof(FrameHeader, code_id), sizeof(id));
  // Every 1024th call is timed, by run_entry.
  if (first != due || sizes > run.max_sizes || id != run.id || ((tick + 1) & 1023) == 0)
      [[unlikely]]
    return false;
  payload_size = static_cast<uint32_t>(sizes);
  return true;
}

// Inlined into drain(): a run's frames are its hottest path. What it does
// per call is run_entry's, less what holds for the run; a check added to one
// belongs in the other.
[[gnu::always_inline]] inline bool Engine::run_next(Link& link, const CodeRun& run,
                                                    std::byte* frame,
                                                    std::optional<ConfinedTrap>& trap) {
  Target& t = *target_;
  uint32_t payload_size = 0;
  if (!continues_run(run, frame, link.in.expected, t.sample_tick, payload_size)) [[unlikely]]
    return false;
  const CodeId id = run.id;
  ++t.sample_tick;
  t.cache.count_call(id);
  ++t.counted_calls;
  t.counted_bytes += payload_size;
  void* const payload = frame + sizeof(FrameHeader);
  if (run.direct != nullptr) [[likely]] {
    // As JitCache::invoke calls it: an exception out of the ifunc ends the
    // process here too, rather than unwinding through the ring.
    [&]() noexcept { run.direct(payload, payload_size, t.options.target_args); }();
    ++t.stats.frames_dispatched;
    return true;
  }
  if (runtime_hooks_ == nullptr) {  // as run_entry: a plain Receiver sets no hooks
    trap = t.cache.invoke(*run.entry, payload, payload_size, t.options.target_args, link.caller);
  } else {
    const RuntimeHooks* previous = exchange_runtime_hooks(runtime_hooks_);
    trap = t.cache.invoke(*run.entry, payload, payload_size, t.options.target_args, link.caller);
    exchange_runtime_hooks(previous);
  }
  ++t.stats.frames_dispatched;
  if (trap) [[unlikely]] {
    ++t.stats.code_trapped;
    ++t.counted->traps;
  }
  return true;
}

// run_next's checks, frame by frame, for as many committed frames of the
// run as there are (up to `most`), then one call into the window for all
// of them. Each header is read once into locals, as run_next reads it;
// their payloads are copied into the window before any of them runs.
uint32_t Engine::run_window_frames(Link& link, const CodeRun& run, uint64_t index, uint32_t most,
                                   std::optional<ConfinedTrap>& trap) {
  Target& t = *target_;
  Inbound& in = link.in;
  std::array<IfuncPayload, kWindowFramesAtOnce>& payloads = t.window_run;
  most = std::min(most, kWindowFramesAtOnce);
  uint64_t expected = in.expected;
  uint32_t count = 0;
  while (count < most) {
    std::byte* const slot = in.ring->data() + index * in.slot_size;
    // drain() read the first one's commit word.
    if (count != 0 && std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot))
                              .load(std::memory_order_acquire) != expected)
      break;
    std::byte* const frame = slot + kCommitWordSize;
    uint32_t payload_size = 0;
    if (!continues_run(run, frame, expected, t.sample_tick + count, payload_size)) break;
    payloads[count] = {frame + sizeof(FrameHeader), payload_size};
    ++count;
    ++expected;
    if (++index == in.slots) index = 0;
  }
  if (count == 0) return 0;
  // The slots after these are most likely committed already (the source
  // refilled them while the last run ran): their lines, which the source
  // wrote, are misses, asked for now so they arrive while these run.
  for (uint32_t k = 0; k < count; ++k) {
    __builtin_prefetch(in.ring->data() + index * in.slot_size);
    if (++index == in.slots) index = 0;
  }
  std::size_t returned = 0;
  if (runtime_hooks_ == nullptr) {  // as run_entry: a plain Receiver sets no hooks
    returned = t.cache.invoke_each(*run.entry, {payloads.data(), count}, t.options.target_args,
                                   trap, link.caller);
  } else {
    const RuntimeHooks* previous = exchange_runtime_hooks(runtime_hooks_);
    returned = t.cache.invoke_each(*run.entry, {payloads.data(), count}, t.options.target_args,
                                   trap, link.caller);
    exchange_runtime_hooks(previous);
  }
  // Consumed: those that returned and the one that trapped (a trap with
  // none returned may be a refusal before any call: too little stack).
  // Those after it are dispatched again, and ticked then.
  const auto took = static_cast<uint32_t>(returned + (trap ? 1 : 0));
  t.sample_tick += took;
  for (uint32_t k = 0; k < took; ++k) {
    t.cache.count_call(run.id);
    t.counted_bytes += payloads[k].size;
  }
  t.counted_calls += took;
  t.stats.frames_dispatched += took;
  t.stats.frames_in_window_runs += took;
  if (trap) [[unlikely]] {
    ++t.stats.code_trapped;
    ++t.counted->traps;
  }
  return took;
}

// Keep in step with run_next, which does the same per call for a run.
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
      t.gpu->run(*static_cast<const gpu::Service::Kernel*>(ifunc.gpu),
                 static_cast<std::byte*>(payload), size, ifunc.gpu_complete != nullptr);
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

// The full path of every frame; a run of frames of one code takes
// start_run/run_next instead, which keep what this settles for it: keep the
// three in step.
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
                    frame_bytes + sizeof(FrameHeader), frame.header().payload_size, link.caller))
      [[unlikely]]
    answer_trap(link, *entry, frame.code_id(), *trap);
  ++t.stats.frames_dispatched;
  return true;
}

// A confined ifunc broke a rule: that invocation ended there. The error
// names it; the source hears it (its next flush or wait throws it); nothing
// else changes: the Receiver serves on, the code stays loaded.
void Engine::answer_trap(Link& link, const CachedIfunc& entry, CodeId id, const ConfinedTrap& trap) {
  Target& t = *target_;
  report(trap_error(entry, id, trap, link.peer_name));
  send_code_refusal(link, id, trap_error(entry, id, trap, link.peer_name, Audience::source));
  count_trap(link, id, entry.gpu != nullptr ? t.names[id] : t.cache.confined_name(entry));
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
  if (in.credit_request.reap() == UCS_INPROGRESS) return;   // one credit in flight at a time
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
      store_credit(in);
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
