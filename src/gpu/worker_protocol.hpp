// Internal: how a Receiver talks to its GPU worker process (gpu_service.cpp
// and worker_main.cpp). Kernels run in a process of their own because CUDA
// cannot recover a process whose context faulted (CUDA_ERROR_ILLEGAL_ADDRESS
// and its kin: "the process must be terminated and relaunched"), and a
// kernel past its deadline can only be stopped with its context: the
// Receiver kills the worker and starts another, and serves on. The worker
// sees only the device memory the Receiver exposed to it (CUDA IPC), not the
// rest of the application's.
//
// One shared mapping (a memfd the worker inherits): the control block, the
// payload, and a text area for PTX. One command at a time: the Receiver
// fills the block, publishes `posted`, and waits for `completed` to match.
#pragma once

#include "gpu/cuda_driver.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace threechains::gpu::worker {

enum class Command : uint32_t {
  load = 1,  // PTX in the text area, the kernel's entry name in `name`: module `id`
  unload,    // module `id`
  run,       // kernel `id` on the payload area's first `size` bytes
  expose,    // the IPC handle at `offset`, `bytes`: the next device region
  quit,
};

struct Control {
  // Written once by the worker when it is up (or has failed to be).
  std::atomic<uint32_t> ready;  // 1 up, 2 failed (message says why)
  int32_t driver_version;
  int32_t multiprocessors;
  char device_name[256];
  char arch[16];
  uint32_t payload_pinned;  // the payload area is pinned and mapped into the GPU

  std::atomic<uint32_t> posted;     // the Receiver's command count
  std::atomic<uint32_t> completed;  // the worker's
  std::atomic<uint32_t> sleeping;   // the worker waits on `posted` (a futex): wake it
  Command command;
  int32_t status;     // errc of the failure, 0 if it worked
  uint32_t poisoned;  // the failure left the worker's CUDA unusable: it exits
  uint32_t copy_back;
  uint64_t id;
  uint64_t size;
  uint64_t offset;
  uint64_t bytes;
  uint64_t text_bytes;
  uint64_t driver_load_ns;
  uint64_t grid;
  CUipcMemHandle handle;
  char name[256];
  char message[8192];
};

inline constexpr std::size_t kControlBytes = 16384;
static_assert(sizeof(Control) <= kControlBytes);
inline constexpr std::size_t kTextBytes = std::size_t{64} << 20;  // PTX of one kernel, at most

inline std::size_t mapping_bytes(std::size_t max_payload) {
  const std::size_t payload = (max_payload + 4095) & ~std::size_t{4095};
  return kControlBytes + payload + kTextBytes;
}

}  // namespace threechains::gpu::worker
