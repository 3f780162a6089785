// Internal: what confined code calls and reads at run time, and the runner
// that gives each invocation its bounds and catches its traps.
//
// The first fields of ConfinedState are an ABI with the code the confinement
// pass (confine/instrument.cpp) emits: it reads them at fixed offsets through the
// absolute symbol __threechains_confined_state, which each JitCache binds to
// its own ConfinedRunner's state. Confined code can never address the state
// itself: it lies in no region.
#pragma once

#include "confine/window_tier.hpp"

#include <threechains/confinement.hpp>
#include <threechains/ifunc.hpp>

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace threechains::confined {

// A range confined code may use; sorted by `begin` in the tables below.
struct Region {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  uint64_t writable = 0;
};

// What the confinement pass emits for each module, under kGlobalsSymbol:
// how many globals it defines, then (address, size, writable) of each.
struct GlobalsTable {
  uint64_t count;
  struct Entry {
    uintptr_t address;
    uint64_t size;
    uint64_t writable;
  } entries[1];  // `count` of them
};

inline constexpr const char* kStateSymbol = "__threechains_confined_state";
inline constexpr const char* kCheckSymbol = "__threechains_confined_check";
inline constexpr const char* kTrapSymbol = "__threechains_confined_trap";
inline constexpr const char* kTickSymbol = "__threechains_confined_tick";
inline constexpr const char* kGlobalsSymbol = "__threechains_confined_globals";
inline constexpr const char* kSitesSymbol = "__threechains_confined_sites";
inline constexpr const char* kSiteCountSymbol = "__threechains_confined_site_count";
// Imports of confined code are renamed to this prefix + their name.
inline constexpr const char* kImportPrefix = "__threechains_confined_import_";
// Names no confined module may define or declare itself.
inline constexpr const char* kReservedPrefix = "__threechains_confined";

// Byte offsets the pass reads; static_asserts in confine/runtime.cpp keep
// them equal to the struct's.
inline constexpr uint64_t kPayloadBegin = 0;
inline constexpr uint64_t kPayloadSize = 8;
inline constexpr uint64_t kStackBegin = 16;
inline constexpr uint64_t kStackSize = 24;
inline constexpr uint64_t kStackPointer = 32;
inline constexpr uint64_t kNativeLimit = 40;
inline constexpr uint64_t kFuel = 48;

// Fuel counts between two looks at the clock, at most. A unit is one
// instruction on the longest path between two fuel points (confine/fuel.cpp)
// or 64 bytes of a checked import's work; kWorstUnitNs is what we take one
// to cost at worst (a load that misses every cache and the TLB), so that a
// chunk is kept under an eighth of the time budget (Runner::Runner).
inline constexpr int64_t kFuelChunk = int64_t{1} << 14;
inline constexpr int64_t kMinFuelChunk = 64;
inline constexpr int64_t kWorstUnitNs = 100;
// A checked import does its work in pieces of this many bytes, spending
// fuel (and looking at the clock when it runs out) between them.
inline constexpr std::size_t kImportPiece = std::size_t{64} << 10;

struct State {
  // --- read by confined code (offsets above) ---
  uintptr_t payload_begin = 0;
  uintptr_t payload_size = 0;
  uintptr_t stack_begin = 0;
  uintptr_t stack_size = 0;
  uintptr_t stack_pointer = 0;  // the data stack grows down from stack_begin + stack_size
  uintptr_t native_limit = 0;   // the thread's stack pointer must stay above it
  int64_t fuel = 0;
  // --- the runtime's own ---
  const Region* globals = nullptr;  // the running ifunc's, sorted
  std::size_t global_count = 0;
  const Region* exposed = nullptr;  // the Receiver's, sorted
  std::size_t exposed_count = 0;
  int64_t started_ns = -1;  // at the first fuel tick of this invocation
  int64_t budget_ns = 0;
  int64_t chunk = kFuelChunk;  // fuel given at each look at the clock
  TrapReason trap = TrapReason::out_of_bounds;
  uintptr_t trap_address = 0;
  std::jmp_buf jump;
};

// What the runtime knows of one loaded confined ifunc.
struct Code {
  std::string name;
  CodeId id = 0;
  std::vector<Region> globals;
  // Its access sites' caches (begin, size each): cleared when the exposed
  // regions change, so none names a region no longer exposed.
  uint64_t* sites = nullptr;
  uint64_t site_count = 0;
  // Its writable globals as they were loaded (empty where they were all
  // zero), to set them back when another caller runs it (Runner::run).
  std::vector<std::vector<std::byte>> initial;
  mutable uint64_t caller = 0;  // whom it last ran for
  // Set for code of the window tier (confine/window_tier.hpp), which has
  // neither globals table nor sites: the fields above stay empty.
  std::unique_ptr<WindowedCode> windowed;

  // Takes `initial` from the globals as they are now (right after linking).
  void remember_initial_globals();
};

// One per JitCache: the state confined code reads, its data stack, the
// regions exposed to it. Runs one confined invocation at a time (the
// Receiver's thread); confined code never calls back into a dispatch.
class Runner {
 public:
  explicit Runner(const ConfinementOptions& options);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  [[nodiscard]] State* state() noexcept { return state_.get(); }
  [[nodiscard]] const ConfinementOptions& options() const noexcept { return options_; }
  // Replaces the exposed regions. The caller clears every loaded code's
  // site caches (clear_sites) before confined code runs again.
  void expose(const std::vector<ExposedRegion>& regions);
  static void clear_sites(const Code& code) noexcept;

  // Before `code` runs for `caller` (JitCache::invoke): nothing an earlier
  // caller's invocations left in the data stack or in `code`'s writable
  // globals reaches this one. Two compares while the caller stays the same.
  void serve(uint64_t caller, const Code& code) noexcept {
    if (caller != caller_) [[unlikely]]
      wipe_stack(caller);
    if (caller != code.caller) [[unlikely]]
      restore_globals(code, caller);
  }
  // Runs `entry` confined to `code`'s globals, `payload` and the exposed
  // regions. nullopt if it returned; the trap if it broke a rule.
  [[nodiscard]] std::optional<ConfinedTrap> run(IfuncMain entry, const Code& code, void* payload,
                                                std::size_t size, void* target_args) noexcept;

 private:
  // Gives back the data stack's pages (they read as zero when next used).
  void wipe_stack(uint64_t caller) noexcept;
  // Sets `code`'s writable globals back to how they were loaded.
  static void restore_globals(const Code& code, uint64_t caller) noexcept;

  std::unique_ptr<State> state_;
  std::byte* stack_ = nullptr;  // mapped: pages can be given back
  std::size_t stack_mapped_ = 0;
  uint64_t caller_ = 0;  // whom the data stack last held locals of
  std::vector<Region> exposed_;
  ConfinementOptions options_;
};

// The absolute symbols a JitCache defines for confined code: the state, the
// runtime's checks, and every import confined code may call (its checked
// wrappers, or the function itself where it takes no pointer).
struct Symbol {
  std::string name;
  void* address;
  bool callable;
};
[[nodiscard]] std::vector<Symbol> runtime_symbols(State* state);

// Whether confined code may import `name` (the pass refuses anything else).
[[nodiscard]] bool is_confined_import(std::string_view name);

}  // namespace threechains::confined
