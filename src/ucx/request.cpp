// Request's waits: cold (set-up, close, a send that must wait for UCX), so
// out of the header every user of the library compiles.
#include <threechains/ucx/request.hpp>

namespace threechains {

ucs_status_t Request::wait(const Worker& worker, std::chrono::milliseconds limit) noexcept {
  const detail::Deadline deadline(limit);
  ucs_status_t status = UCS_OK;
  while ((status = reap()) == UCS_INPROGRESS) {
    if (worker.progress() == 0 && deadline.passed()) {
      cancel(worker);
      return UCS_ERR_TIMED_OUT;
    }
  }
  return status;
}

void Request::cancel(const Worker& worker) noexcept {
  if (handle_ == nullptr) return;
  if (ucp_request_check_status(handle_) == UCS_INPROGRESS)
    ucp_request_cancel(worker.handle(), handle_);
  for (int round = 0; round < 1000 && ucp_request_check_status(handle_) == UCS_INPROGRESS;
       ++round) {
    worker.progress();
  }
  release();
}

}  // namespace threechains
