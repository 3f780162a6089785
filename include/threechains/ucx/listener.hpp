// Listener: RAII owner of a ucp_listener_h on a sockaddr. Connection requests
// are handed to a callback during Worker::progress().
#pragma once

#include <threechains/ucx/worker.hpp>

#include <ucp/api/ucp.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace threechains {

class Listener {
 public:
  using OnConnect = std::function<void(ucp_conn_request_h)>;

  // Listens on all interfaces at `port` (0: the OS picks; see port()).
  Listener(Worker worker, uint16_t port, OnConnect on_connect);

  [[nodiscard]] uint16_t port() const noexcept { return state_->port; }

 private:
  struct State {
    State(Worker w, OnConnect c) : worker(std::move(w)), on_connect(std::move(c)) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State();
    Worker worker;
    OnConnect on_connect;
    ucp_listener_h handle = nullptr;
    uint16_t port = 0;
  };
  std::unique_ptr<State> state_;
};

}  // namespace threechains
