// Internal: the window tier of confined code (issue 33). Confined bitcode
// that takes the window shape (confine/pass.hpp) is compiled that way by
// the compile worker, linked into a window of its own (jit/window_link.hpp),
// and run only after the verifier (confine/verify_x86.hpp) accepted the
// machine code as linked: the compiler is outside what the target trusts.
// This is what one such ifunc holds, and how one invocation runs:
//  - the payload is copied into the window (a pointer to the frame's own
//    bytes would mean nothing there); a run of one caller's payloads is
//    copied at once, each to its own place, and run with one way into the
//    window (run_each: the register hygiene once for all of them);
//  - target_args is passed where it lies in memory exposed to windows
//    (ExposureArena): its low 32 bits are its offset there; anything else
//    is passed as null, which faults (Window::kLowGuard);
//  - for another caller than the last, the whole payload area is wiped
//    (the code may write anywhere in it) and the writable globals are set
//    back to how they were linked;
//  - run_window_code runs it under the time budget (window_watchdog.hpp).
#pragma once

#include "confine/exposure.hpp"
#include "confine/window.hpp"
#include "confine/window_traps.hpp"

#include <threechains/confinement.hpp>
#include <threechains/ifunc.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace threechains::confined {

struct WindowedCode {
  Window* window = nullptr;  // the JitCache's, kept while it lives
  WindowCode entry;          // as the verifier accepted it
  // In the window: where payloads are copied, owned by the window's slot
  // in the JitCache (which outlives the code, and wipes it when the next
  // code gets the window). The code may write all of it, so a caller
  // change wipes all of it; it grows for a larger payload.
  std::span<std::byte>* payload = nullptr;
  struct Data {
    std::span<std::byte> bytes;      // a writable segment, in the window
    std::vector<std::byte> initial;  // as linked (empty: all zero)
  };
  std::vector<Data> data;
  uint64_t caller = 0;  // whom it last ran for

  // Takes `data`'s initial values from the segments as they are now.
  void remember_initial_data();
  // Before a run for `caller`: wipes the payload copy and sets the data
  // back if the caller changed.
  void serve(uint64_t next_caller) noexcept {
    if (next_caller != caller) [[unlikely]]
      change_caller(next_caller);
  }
  // Runs one invocation; nullopt if it returned, else the trap (its
  // address: the offset in the window it reached for, or the offset of
  // the instruction stopped).
  [[nodiscard]] std::optional<ConfinedTrap> run(const void* payload_bytes, std::size_t size,
                                                void* target_args, const ExposureArena* arena,
                                                std::chrono::nanoseconds budget) noexcept;
  // The most payloads run_each takes at once, and the most bytes of the
  // payload area they may take (a larger payload runs alone).
  static constexpr std::size_t kMostAtOnce = 32;
  static constexpr std::size_t kMostBytesAtOnce = 64 * 1024;
  // Runs one invocation per payload, in order, all for the caller serve()
  // was last given, entering the window once for all of them
  // (run_window_calls): each payload is copied to a place of its own in the
  // payload area first. Returns how many returned; a trap, of
  // payloads[returned], in `trap`, and none after it ran. At most
  // kMostAtOnce of `payloads` run, and fewer where they would take more
  // than kMostBytesAtOnce; the rest are not looked at (returned is less
  // than their number, and no trap).
  [[nodiscard]] std::size_t run_each(std::span<const IfuncPayload> payloads, void* target_args,
                                     const ExposureArena* arena, std::chrono::nanoseconds budget,
                                     std::optional<ConfinedTrap>& trap) noexcept;

 private:
  void change_caller(uint64_t next_caller) noexcept;
  // The payload area at least `bytes` long (grown, the old one retired);
  // false if the window has no room.
  [[nodiscard]] bool fit(std::size_t bytes) noexcept;
};

// What a trap of window code is, in the terms every confined tier reports.
[[nodiscard]] ConfinedTrap confined_trap_of(const WindowTrap& trap) noexcept;

}  // namespace threechains::confined
