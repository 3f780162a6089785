// Outbox: control Active Messages in flight. UCX needs an AM's header and data
// to stay valid until the send completes; the outbox owns them until then and
// frees finished requests on every round of progress. Control traffic only.
#pragma once

#include <threechains/ucx/endpoint.hpp>
#include <threechains/ucx/request.hpp>
#include <threechains/ucx/worker.hpp>

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace threechains::detail {

class Outbox {
 public:
  // Sends AM `id` with a copied header and data; `keep_alive` may own the data
  // instead of a copy. Throws Error naming ucp_am_send_nbx if UCX refuses.
  // Returns what expires when this send completed (already, if it did at once),
  // for a caller that must order something else after this one message.
  template <class Header>
  std::weak_ptr<const void> send(const Endpoint& endpoint, unsigned id, const Header& header,
                                 std::span<const std::byte> data,
                                 std::shared_ptr<const void> keep_alive = nullptr) {
    static_assert(std::is_trivially_copyable_v<Header>, "a control header travels as bytes");
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
    message->request = endpoint.am_send(id, message->header.data(), message->header.size(),
                                        message->data.data(), message->data.size());
    if (!message->request.pending()) return {};
    std::weak_ptr<const void> completion = message->in_flight;
    pending_.push_back(std::move(message));
    return completion;
  }

  // Frees the messages whose sends finished. Returns how many are still in flight.
  std::size_t reap() noexcept {
    std::erase_if(pending_, [](const std::unique_ptr<Message>& m) {
      return m->request.reap() != UCS_INPROGRESS;
    });
    return pending_.size();
  }

  [[nodiscard]] bool empty() const noexcept { return pending_.empty(); }

  // Cancels what is still in flight (the engine is going away).
  void cancel_all(const Worker& worker) noexcept {
    for (auto& m : pending_) m->request.cancel(worker);
    pending_.clear();
  }

 private:
  struct Message {
    std::vector<std::byte> header;
    std::vector<std::byte> owned;
    std::span<const std::byte> data;
    std::shared_ptr<const void> keep_alive;
    Request request;
    std::shared_ptr<const void> in_flight = std::make_shared<char>();  // weak copies: send()
  };
  std::vector<std::unique_ptr<Message>> pending_;
};

}  // namespace threechains::detail
