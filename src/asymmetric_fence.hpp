// The two halves of a store-then-load handshake between processes where one
// side is hot (a source committing frames, millions a second) and the other
// rare (a target going to sleep): the hot side keeps only the compiler from
// reordering, the rare side makes every CPU that runs a registered process
// execute a full barrier (membarrier(2), MEMBARRIER_CMD_GLOBAL_EXPEDITED).
#pragma once

namespace threechains::detail {

// Registers this process (once) for the rare side's barrier. False where the
// kernel does not offer it: the hot side must then fence for itself.
[[nodiscard]] bool hot_side_registered() noexcept;

// The rare side: a full barrier on every CPU running a registered process
// (and, failing that, on every CPU: MEMBARRIER_CMD_GLOBAL). False if neither
// exists: the caller must not rely on seeing the hot side's stores.
[[nodiscard]] bool heavy_fence() noexcept;

}  // namespace threechains::detail
