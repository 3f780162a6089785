#include "asymmetric_fence.hpp"

#include <atomic>

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace threechains::detail {

namespace {

int membarrier(int command) noexcept {
  return static_cast<int>(syscall(__NR_membarrier, command, 0, 0));
}

}  // namespace

bool hot_side_registered() noexcept {
  static const bool registered = membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
  return registered;
}

bool heavy_fence() noexcept {
  // The caller's own store before the barrier; membarrier orders the others'.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return true;
  return membarrier(MEMBARRIER_CMD_GLOBAL) == 0;
}

}  // namespace threechains::detail
