// What window_tier.hpp says.
#include "confine/window_tier.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace threechains::confined {

namespace {
// A payload into the window: most are a few words, which a call to memcpy
// would cost more than (threechains-bench-confine, the counter).
void copy_payload(std::byte* to, const std::byte* from, std::size_t size) noexcept {
  if (size > 16) {
    std::memcpy(to, from, size);
  } else if (size >= 8) {  // the first and last 8 bytes, overlapping
    uint64_t first = 0;
    uint64_t last = 0;
    std::memcpy(&first, from, 8);
    std::memcpy(&last, from + size - 8, 8);
    std::memcpy(to, &first, 8);
    std::memcpy(to + size - 8, &last, 8);
  } else {
    for (std::size_t k = 0; k < size; ++k) to[k] = from[k];
  }
}

// A payload's place in a run: whole cache lines, one at least.
constexpr std::size_t round_up_line(std::size_t bytes) noexcept {
  return std::max<std::size_t>((bytes + 63) & ~std::size_t{63}, 64);
}
}  // namespace

void WindowedCode::remember_initial_data() {
  for (Data& segment : data) {
    segment.initial.clear();
    if (std::any_of(segment.bytes.begin(), segment.bytes.end(),
                    [](std::byte b) { return b != std::byte{0}; }))
      segment.initial.assign(segment.bytes.begin(), segment.bytes.end());
  }
}

void WindowedCode::change_caller(uint64_t next_caller) noexcept {
  std::memset(payload->data(), 0, payload->size());
  for (Data& segment : data) {
    if (segment.initial.empty()) {
      std::memset(segment.bytes.data(), 0, segment.bytes.size());
    } else {
      std::memcpy(segment.bytes.data(), segment.initial.data(), segment.bytes.size());
    }
  }
  caller = next_caller;
}

bool WindowedCode::fit(std::size_t bytes) noexcept {
  std::span<std::byte>& area = *payload;
  if (bytes <= area.size()) return true;
  // Larger than the window's payload area: a new one, the old one retired.
  try {
    std::size_t larger = std::max<std::size_t>(area.size(), 1);
    while (larger < bytes) larger *= 2;
    const std::span<std::byte> memory = window->allocate(larger, true);
    window->retire(area);
    area = memory;
    return true;
  } catch (...) {
    return false;
  }
}

std::optional<ConfinedTrap> WindowedCode::run(const void* payload_bytes, std::size_t size,
                                              void* target_args, const ExposureArena* arena,
                                              std::chrono::nanoseconds budget) noexcept {
  // One call: the way in for one (run_window_code), cheaper than a run of
  // one by about 1 ns (threechains-bench-window).
  if (!fit(size)) return ConfinedTrap{TrapReason::out_of_bounds, 0};  // the window has no room
  std::byte* const to = payload->data();
  copy_payload(to, static_cast<const std::byte*>(payload_bytes), size);
  const bool exposed =
      arena != nullptr && target_args != nullptr && arena->contains(target_args, 1);
#if defined(__x86_64__) || defined(__aarch64__)
  uint64_t result = 0;
  const std::optional<WindowTrap> trap =
      run_window_code(*window, entry, result, reinterpret_cast<uint64_t>(to), size,
                      exposed ? reinterpret_cast<uint64_t>(target_args) : 0, budget);
  if (!trap) return std::nullopt;
  return confined_trap_of(*trap);
#else
  (void)exposed;
  (void)budget;
  return ConfinedTrap{TrapReason::unreachable, 0};  // no window tier here: never loaded
#endif
}

std::size_t WindowedCode::run_each(std::span<const IfuncPayload> payloads, void* target_args,
                                   const ExposureArena* arena, std::chrono::nanoseconds budget,
                                   std::optional<ConfinedTrap>& trap) noexcept {
  trap.reset();
  std::size_t count = std::min(payloads.size(), kMostAtOnce);
  if (count == 0) return 0;
  // Each payload at a cache line of its own, the first at the area's
  // start, as a single one always was; as many as fit kMostBytesAtOnce (a
  // larger payload runs alone): the area is wiped whole at every change of
  // caller and never shrinks, and 32 payloads of 1 MiB had grown it to
  // 64 MiB (helper-21). A large one ends the run before it, so small ones
  // before it still run together.
  std::size_t largest = payloads[0].size;
  std::size_t stride = round_up_line(largest);
  std::size_t fitting = 1;
  for (; fitting < count; ++fitting) {
    const std::size_t wider = std::max(largest, payloads[fitting].size);
    if ((fitting + 1) * round_up_line(wider) > kMostBytesAtOnce) break;
    largest = wider;
    stride = round_up_line(wider);
  }
  count = fitting;
  if (!fit(count == 1 ? largest : stride * count)) {
    trap = ConfinedTrap{TrapReason::out_of_bounds, 0};  // the window has no room for them
    return 0;
  }
  std::span<std::byte>& area = *payload;
  const bool exposed =
      arena != nullptr && target_args != nullptr && arena->contains(target_args, 1);
  const uint64_t args = exposed ? reinterpret_cast<uint64_t>(target_args) : 0;
  std::array<WindowCall, kMostAtOnce> calls;
  for (std::size_t k = 0; k < count; ++k) {
    std::byte* const to = area.data() + k * stride;
    copy_payload(to, static_cast<const std::byte*>(payloads[k].bytes), payloads[k].size);
    calls[k] = {reinterpret_cast<uint64_t>(to), payloads[k].size, args, 0};
  }
#if defined(__x86_64__) || defined(__aarch64__)
  std::size_t returned = 0;
  if (const std::optional<WindowTrap> stopped =
          run_window_calls(*window, entry, {calls.data(), count}, returned, budget))
    trap = confined_trap_of(*stopped);
  return returned;
#else
  (void)budget;
  trap = ConfinedTrap{TrapReason::unreachable, 0};  // no window tier here: never loaded
  return 0;
#endif
}

ConfinedTrap confined_trap_of(const WindowTrap& trap) noexcept {
  TrapReason reason = TrapReason::out_of_bounds;
  switch (trap.fault) {
    case WindowFault::access:
    case WindowFault::general:
    case WindowFault::outside:
      reason = TrapReason::out_of_bounds;
      break;
    case WindowFault::illegal:
      reason = TrapReason::unreachable;
      break;
    case WindowFault::arithmetic:
      reason = TrapReason::division;
      break;
    case WindowFault::stack:
      reason = TrapReason::stack_exhausted;
      break;
    case WindowFault::time:
      reason = TrapReason::out_of_time;
      break;
  }
  return ConfinedTrap{reason, static_cast<uintptr_t>(trap.offset)};
}

}  // namespace threechains::confined
