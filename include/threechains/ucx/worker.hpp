// Worker: RAII owner of a ucp_worker_h (single-threaded, polled). Holds its
// Context alive. Copies share the same UCX worker.
#pragma once

#include <threechains/error.hpp>
#include <threechains/ucx/context.hpp>

#include <ucp/api/ucp.h>

#include <chrono>
#include <memory>

namespace threechains {

namespace detail {
class Engine;

// `limit` from now, on the steady clock; asked only when a wait found nothing
// to do, so out of line (no clock arithmetic in every includer).
class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds limit) noexcept;
  [[nodiscard]] bool passed() const noexcept;

 private:
  std::chrono::steady_clock::time_point at_;
};
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
    const detail::Deadline deadline(limit);
    while (!done()) {
      if (progress() == 0 && deadline.passed()) {
        if (done()) return;
        throw_timed_out(what);
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
  // Throws errc::timeout naming `what` (out of line: cold).
  [[noreturn]] static void throw_timed_out(const char* what);
  void set_library_am_handler(unsigned id, ucp_am_recv_callback_t callback, void* arg) const;

  Context context_;
  std::shared_ptr<ucp_worker> handle_;
};

}  // namespace threechains
