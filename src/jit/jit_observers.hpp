// Debuggers and profilers that see JIT'd ifuncs (issue 23): GDB's JIT
// interface and perf's jitdump, both through ORC's own plugins, opt-in.
#pragma once

namespace llvm::orc {
class LLJIT;
}

namespace threechains {

struct JitOptions;

namespace jit {

// What was asked for, from JitOptions and the environment
// (THREECHAINS_JIT_DEBUG=1, THREECHAINS_JIT_PERF=1).
struct ObserverRequest {
  bool debugger = false;
  bool perf = false;
  // Asked for by the environment only: a failure then warns instead of throwing.
  bool debugger_from_environment = false;
  bool perf_from_environment = false;
};
[[nodiscard]] ObserverRequest observers_requested(const JitOptions& options);

// Holds what a JitCache registered with observers for its lifetime: its share
// of the process's one jitdump file (perf reads one per process, so every
// cache that asks for it writes to the same file through one plugin, opened
// by the first and closed by the last). Destroy it after the LLJIT it was
// attached to: the JIT's linking layer holds the shared plugin until then.
class Observers {
 public:
  Observers();
  ~Observers();
  Observers(Observers&&) noexcept;
  Observers& operator=(Observers&&) noexcept;
  Observers(const Observers&) = delete;
  Observers& operator=(const Observers&) = delete;

 private:
  friend Observers attach_observers(llvm::orc::LLJIT& jit, const ObserverRequest& request);
  bool holds_perf_session_ = false;
};

// Adds the requested plugins to `jit`'s object linking layer; every object it
// links afterwards (binary code, bitcode compiled here, tier-1 promotions) is
// registered. Throws Error(jit_failed) when asked for by JitOptions and not
// possible; when asked for by the environment, warns on stderr once and goes on.
[[nodiscard]] Observers attach_observers(llvm::orc::LLJIT& jit, const ObserverRequest& request);

}  // namespace jit
}  // namespace threechains
