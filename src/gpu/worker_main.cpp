// threechains-gpu-worker: the process a Receiver's GPU kernels run in
// (worker_protocol.hpp says why). Started by the Receiver with the shared
// mapping as descriptor 3 and its lifeline pipe as 4; ends when told, when
// its CUDA context faulted, or with the Receiver (EOF on the lifeline).
#include "gpu/executor.hpp"
#include "gpu/worker_protocol.hpp"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gpu = threechains::gpu;
namespace worker = threechains::gpu::worker;
using threechains::errc;
using threechains::Error;

namespace {

void say(worker::Control& control, const std::string& text) {
  std::snprintf(control.message, sizeof(control.message), "%s", text.c_str());
}

int status_of(const Error& error) {
  return error.code().category() == threechains::threechains_category()
             ? error.code().value()
             : static_cast<int>(errc::gpu_failed);
}

// Waits for the next command: spins `spin` (a Receiver under load posts the
// next one within microseconds), then sleeps on the futex until woken.
uint32_t next_command(worker::Control& control, uint32_t seen, std::chrono::nanoseconds spin) {
  const auto until = std::chrono::steady_clock::now() + spin;
  for (unsigned polls = 0;; ++polls) {
    const uint32_t posted = control.posted.load(std::memory_order_acquire);
    if (posted != seen) return posted;
    if ((polls & 255) == 0 && std::chrono::steady_clock::now() > until) break;
#if defined(__x86_64__)
    _mm_pause();
#endif
  }
  for (;;) {
    control.sleeping.store(1, std::memory_order_seq_cst);
    const uint32_t posted = control.posted.load(std::memory_order_seq_cst);
    if (posted != seen) {
      control.sleeping.store(0, std::memory_order_relaxed);
      return posted;
    }
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&control.posted), FUTEX_WAIT, seen, nullptr,
            nullptr, 0);
    control.sleeping.store(0, std::memory_order_relaxed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "threechains-gpu-worker is started by a Receiver (ReceiverOptions::gpu)\n");
    return 2;
  }
  const int parent = std::atoi(argv[4]);
  if (getppid() != parent) return 2;
  threechains::GpuOptions options;
  options.device = std::atoi(argv[1]);
  const std::size_t max_payload = std::strtoull(argv[2], nullptr, 10);
  options.mapped_payload_max = std::strtoull(argv[3], nullptr, 10);
  constexpr int kMappingFd = 3;
  constexpr int kLifelineFd = 4;
  // Nothing else of the Receiver's process: only its two descriptors.
  close_range(kLifelineFd + 1, ~0U, 0);
  // The Receiver's process gone (its end of the lifeline closed): so is this one.
  std::thread([] {
    char byte = 0;
    while (read(kLifelineFd, &byte, 1) != 0 && errno == EINTR) {
    }
    std::_Exit(0);
  }).detach();
  const std::size_t bytes = worker::mapping_bytes(max_payload);
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, kMappingFd, 0);
  if (mapping == MAP_FAILED) return 2;
  close(kMappingFd);
  auto& control = *static_cast<worker::Control*>(mapping);
  auto* payload = static_cast<std::byte*>(mapping) + worker::kControlBytes;
  const char* text =
      reinterpret_cast<const char*>(payload) + (bytes - worker::kControlBytes - worker::kTextBytes);
  try {
    gpu::Executor executor(options, max_payload);
    // Payloads arrive in the shared area: pinned, the kernel reads them there.
    control.payload_pinned =
        executor.adopt_payload_buffer(payload, bytes - worker::kControlBytes - worker::kTextBytes)
            ? 1
            : 0;
    const threechains::GpuInfo& info = executor.info();
    control.driver_version = info.driver_version;
    control.multiprocessors = info.multiprocessors;
    std::snprintf(control.device_name, sizeof(control.device_name), "%s", info.name.c_str());
    std::snprintf(control.arch, sizeof(control.arch), "%s", info.arch.c_str());
    control.ready.store(1, std::memory_order_release);

    uint32_t seen = 0;
    for (;;) {
      seen = next_command(control, seen, std::chrono::milliseconds(1));
      control.status = 0;
      control.poisoned = 0;
      control.message[0] = '\0';
      try {
        switch (control.command) {
          case worker::Command::load: {
            gpu::Ptx ptx;
            ptx.text.assign(text, control.text_bytes);
            const std::string name(control.name);
            ptx.entry = name + "_main";
            const gpu::KernelLoad loaded = executor.load_ptx(control.id, name, std::move(ptx));
            control.driver_load_ns = static_cast<uint64_t>(loaded.driver_load.count());
            control.grid = loaded.kernel->grid;
            break;
          }
          case worker::Command::unload:
            executor.unload(control.id);
            break;
          case worker::Command::run: {
            const gpu::Kernel* kernel = executor.find(control.id);
            if (kernel == nullptr)
              throw Error(errc::gpu_failed, "no such kernel in the GPU worker");
            if (std::optional<Error> failed =
                    executor.run(*kernel, payload, control.size, control.copy_back != 0)) {
              control.status = status_of(*failed);
              say(control, failed->context());
            }
            break;
          }
          case worker::Command::expose:
            executor.expose_ipc(control.handle, control.offset, control.bytes);
            break;
          case worker::Command::quit:
            control.completed.store(seen, std::memory_order_release);
            return 0;
        }
      } catch (const Error& error) {
        control.status = status_of(error);
        say(control, error.context());
      } catch (const std::exception& error) {
        control.status = static_cast<int>(errc::gpu_failed);
        say(control, error.what());
      }
      control.poisoned = executor.poisoned() ? 1 : 0;
      control.completed.store(seen, std::memory_order_release);
      // A faulted context cannot be used again in this process: the
      // Receiver starts another worker.
      if (executor.poisoned()) std::_Exit(3);
    }
  } catch (const std::exception& error) {
    say(control, error.what());
    control.ready.store(2, std::memory_order_release);
    return 1;
  }
}
