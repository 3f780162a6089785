// Request: RAII owner of one UCX request (what a *_nbx call returns). Checked,
// waited for, cancelled and freed here and nowhere else.
#pragma once

#include <threechains/error.hpp>
#include <threechains/ucx/worker.hpp>

#include <ucp/api/ucp.h>

#include <chrono>
#include <utility>

namespace threechains {

class Request {
 public:
  Request() noexcept = default;
  // Takes what a *_nbx call returned: nullptr (done in place) or a request in
  // flight. An error pointer throws Error naming `operation`.
  Request(ucs_status_ptr_t returned, const char* operation) {
    if (UCS_PTR_IS_ERR(returned)) [[unlikely]]
      throw Error(UCS_PTR_STATUS(returned), operation);
    handle_ = returned;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  Request(Request&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Request& operator=(Request&& other) noexcept {
    if (this != &other) {
      release();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  // UCX lets a request go in flight: it completes inside UCX. The buffers it
  // reads must outlive it, which is the owner's business (close the endpoint).
  ~Request() { release(); }

  // True while UCX is still working on it.
  [[nodiscard]] bool pending() const noexcept {
    return handle_ != nullptr && ucp_request_check_status(handle_) == UCS_INPROGRESS;
  }

  // Frees the request once it is complete; returns its status, or UCS_INPROGRESS.
  ucs_status_t reap() noexcept {
    if (handle_ == nullptr) return UCS_OK;
    const ucs_status_t status = ucp_request_check_status(handle_);
    if (status != UCS_INPROGRESS) release();
    return status;
  }

  // Progresses `worker` until the request completes; after `limit` cancels it
  // and returns UCS_ERR_TIMED_OUT. Frees it either way.
  ucs_status_t wait(const Worker& worker, std::chrono::milliseconds limit) noexcept;

  // Cancels what can be cancelled and frees the request. Progresses a bounded
  // number of rounds for UCX to let go; past that the request is released to
  // complete inside UCX.
  void cancel(const Worker& worker) noexcept;

 private:
  void release() noexcept {
    if (handle_ != nullptr) ucp_request_free(handle_);
    handle_ = nullptr;
  }
  void* handle_ = nullptr;
};

}  // namespace threechains
