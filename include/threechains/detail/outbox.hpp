// Outbox: control Active Messages in flight. UCX needs an AM's header and data
// to stay valid until the send completes; the outbox owns them until then and
// frees finished requests on every poll. Control traffic only, never frames.
#pragma once

#include <threechains/error.hpp>
#include <threechains/ucx/endpoint.hpp>
#include <threechains/ucx/worker.hpp>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

namespace threechains::detail {

class Outbox {
 public:
  // Sends AM `id` with a copied header and data; `keep_alive` may own the data instead.
  template <class Header>
  void send(const Endpoint& endpoint, unsigned id, const Header& header,
            std::span<const std::byte> data, std::shared_ptr<const void> keep_alive = nullptr) {
    auto message = std::make_unique<Message>();
    message->header.resize(sizeof(Header));
    std::memcpy(message->header.data(), &header, sizeof(Header));
    if (keep_alive) {
      message->keep_alive = std::move(keep_alive);
      message->data = data;
    } else {
      message->owned.assign(data.begin(), data.end());
      message->data = message->owned;
    }
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // Eager: the receiver's handler sees the whole message at once, no rendezvous.
    params.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t request =
        ucp_am_send_nbx(endpoint.handle(), id, message->header.data(), message->header.size(),
                        message->data.data(), message->data.size(), &params);
    if (UCS_PTR_IS_ERR(request)) check(UCS_PTR_STATUS(request), "ucp_am_send_nbx(control)");
    if (request == nullptr) return;  // completed in place
    message->request = request;
    pending_.push_back(std::move(message));
  }

  // Frees the requests that finished. Returns how many are still in flight.
  std::size_t reap() noexcept {
    std::erase_if(pending_, [](const std::unique_ptr<Message>& m) {
      if (ucp_request_check_status(m->request) == UCS_INPROGRESS) return false;
      ucp_request_free(m->request);
      m->request = nullptr;
      return true;
    });
    return pending_.size();
  }

  [[nodiscard]] bool empty() const noexcept { return pending_.empty(); }

  // Cancels what is still in flight (peer gone); progresses until UCX lets go.
  void cancel_all(const Worker& worker) noexcept {
    for (auto& m : pending_) ucp_request_cancel(worker.handle(), m->request);
    while (reap() != 0) worker.progress();
  }

 private:
  struct Message {
    std::vector<std::byte> header;
    std::vector<std::byte> owned;
    std::span<const std::byte> data;
    std::shared_ptr<const void> keep_alive;
    void* request = nullptr;
  };
  std::vector<std::unique_ptr<Message>> pending_;
};

}  // namespace threechains::detail
