// Worker: RAII owner of a ucp_worker_h (single-threaded, polled). Holds its
// Context alive. Copies share the same UCX worker.
#pragma once

#include <threechains/error.hpp>
#include <threechains/ucx/context.hpp>

#include <ucp/api/ucp.h>

#include <chrono>
#include <memory>
#include <string>

namespace threechains {

namespace detail {
class Engine;
}  // namespace detail

struct WorkerOptions {
  // Alignment UCX guarantees for Active Message data handed to handlers. Frames
  // delivered by AM carry an 8-byte word before their header, so 16 puts the
  // payload on a 16-byte boundary, as in a ring slot.
  std::size_t am_alignment = 16;
};

class Worker {
 public:
  explicit Worker(Context context, const WorkerOptions& options = {});

  [[nodiscard]] ucp_worker_h handle() const noexcept { return handle_.get(); }
  [[nodiscard]] const Context& context() const noexcept { return context_; }

  // One round of UCX progress; returns how many events it handled.
  unsigned progress() const noexcept { return ucp_worker_progress(handle_.get()); }

  // Orders this worker's earlier RMA/AM operations before its later ones, per endpoint.
  void fence() const { check(ucp_worker_fence(handle_.get()), "ucp_worker_fence"); }

  // Progresses until `done()` holds; throws errc::timeout after `limit`.
  template <class Predicate>
  void progress_until(Predicate&& done, std::chrono::milliseconds limit,
                      const char* what = "progress_until") const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (progress() == 0 && std::chrono::steady_clock::now() > deadline) {
        if (done()) return;
        throw Error(errc::timeout, std::string(what) + ": timed out");
      }
    }
  }

  // Active Message ids ThreeChains itself uses on a worker that has a
  // Receiver, Source or Node: [kFirstLibraryAmId, kLastLibraryAmId].
  static constexpr unsigned kFirstLibraryAmId = 0x7C00;
  static constexpr unsigned kLastLibraryAmId = 0x7CFF;

  // Registers `callback(arg, ...)` for Active Messages with `id` on this
  // worker. Throws errc::invalid_argument for an id in the library's range:
  // replacing one of its handlers would silently break every channel.
  void set_am_handler(unsigned id, ucp_am_recv_callback_t callback, void* arg) const;

 private:
  friend class detail::Engine;
  void set_library_am_handler(unsigned id, ucp_am_recv_callback_t callback, void* arg) const;

  Context context_;
  std::shared_ptr<ucp_worker> handle_;
};

}  // namespace threechains
