// Worker's set-up and its Active Message handlers: cold, so out of the
// header that every user of the library compiles (progress stays inline).
#include <threechains/ucx/worker.hpp>

#include <string>

namespace threechains {

detail::Deadline::Deadline(std::chrono::milliseconds limit) noexcept
    : at_(std::chrono::steady_clock::now() + limit) {}

bool detail::Deadline::passed() const noexcept {
  return std::chrono::steady_clock::now() > at_;
}

Worker::Worker(Context context, const WorkerOptions& options) : context_(std::move(context)) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  params.am_alignment = options.am_alignment;
  ucp_worker_h handle = nullptr;
  check(ucp_worker_create(context_.handle(), &params, &handle), "ucp_worker_create");
  handle_ = std::shared_ptr<ucp_worker>(handle, [](ucp_worker_h h) { ucp_worker_destroy(h); });
}

void Worker::throw_timed_out(const char* what) {
  throw Error(errc::timeout, std::string(what) + ": timed out");
}

void Worker::set_am_handler(unsigned id, ucp_am_recv_callback_t callback, void* arg) const {
  if (id >= kFirstLibraryAmId && id <= kLastLibraryAmId) {
    throw Error(errc::invalid_argument, "Active Message id " + std::to_string(id) +
                                            " is ThreeChains' own (" +
                                            std::to_string(kFirstLibraryAmId) + ".." +
                                            std::to_string(kLastLibraryAmId) + "): pick another");
  }
  set_library_am_handler(id, callback, arg);
}

void Worker::set_library_am_handler(unsigned id, ucp_am_recv_callback_t callback, void* arg) const {
  ucp_am_handler_param_t params{};
  params.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  params.id = id;
  params.cb = callback;
  params.arg = arg;
  params.flags = UCP_AM_FLAG_WHOLE_MSG;
  check(ucp_worker_set_am_recv_handler(handle_.get(), &params), "ucp_worker_set_am_recv_handler");
}

}  // namespace threechains
