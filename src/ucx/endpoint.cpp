// Endpoint's set-up and teardown: cold (once per connection), so out of the
// header every user of the library compiles. The sends stay inline.
#include <threechains/ucx/endpoint.hpp>

#include <netdb.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace threechains {
namespace {

// host:port as a socket address UCX's sockaddr connect takes.
socklen_t resolve(const std::string& host, uint16_t port, sockaddr_storage& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result); rc != 0) {
    throw Error(UCS_ERR_INVALID_ADDR, "cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  const socklen_t length = result->ai_addrlen;
  std::memcpy(&out, result->ai_addr, length);
  freeaddrinfo(result);
  return length;
}

}  // namespace

Endpoint Endpoint::create(const Worker& worker, ucp_ep_params_t& params, const char* what) {
  auto state = std::make_shared<State>(worker);
  params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
    static_cast<State*>(arg)->status = status;
    failures_.fetch_add(1, std::memory_order_release);  // after the status
  };
  params.err_handler.arg = state.get();
  check(ucp_ep_create(worker.handle(), &params, &state->handle), what);
  return Endpoint(std::move(state));
}

Endpoint Endpoint::connect(const Worker& worker, const std::string& host, uint16_t port) {
  sockaddr_storage address{};
  const socklen_t length = resolve(host, port, address);
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
  params.sockaddr.addrlen = length;
  const std::string what = "ucp_ep_create(" + host + ":" + std::to_string(port) + ")";
  return create(worker, params, what.c_str());
}

Endpoint Endpoint::accept(const Worker& worker, ucp_conn_request_h request) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
  params.conn_request = request;
  return create(worker, params, "ucp_ep_create(accept)");
}

std::string Endpoint::describe() const {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return {};
  ucp_ep_print_info(state_->handle, stream);
  std::fclose(stream);
  std::string out(text, size);
  std::free(text);
  return out;
}

Endpoint::State::~State() {
  close(UCP_EP_CLOSE_FLAG_FORCE, std::chrono::milliseconds(200));
}

Request Endpoint::State::start_close(uint32_t flags) noexcept {
  if (handle == nullptr) return {};
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = flags;
  ucs_status_ptr_t request = ucp_ep_close_nbx(handle, &params);
  handle = nullptr;
  if (UCS_PTR_IS_ERR(request)) {
    if (status == UCS_OK) status = UCS_PTR_STATUS(request);
    return {};
  }
  return {request, "ucp_ep_close_nbx"};
}

void Endpoint::State::close(uint32_t flags, std::chrono::milliseconds limit) noexcept {
  Request request = start_close(flags);
  if (request.wait(worker, limit) != UCS_OK && status == UCS_OK) status = UCS_ERR_CANCELED;
}

}  // namespace threechains
