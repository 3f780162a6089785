// What the research prototypes' example programs do before their first ifunc
// call, as they do it: a UCX context with RMA, one single-threaded worker, a
// heap mapped by UCX, and a TCP socket between the processes over which
// heap addresses, rkeys and worker addresses are exchanged. Only
// <ucp/api/ucp.h> and the C library: the programs built on it must compile
// against the prototypes' API with nothing but -include threechains/ucp_ifunc.h.
//
// Unlike the prototypes, the server listens on a port the kernel picks and
// writes it to a file (tests/bindings/run_pair.sh waits for it), so tests can
// run side by side; failures exit with a message instead of assert().
#pragma once

#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace proto {

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  std::exit(1);
}

inline void check(ucs_status_t status, const char* what) {
  if (status != UCS_OK) die(std::string(what) + ": " + ucs_status_string(status));
}

// A non-blocking put (ucp_put_nbi, ucp_ifunc_send_nbix): UCS_INPROGRESS is
// no error, only not complete yet (a flush completes it).
inline void check_put(ucs_status_t status, const char* what) {
  if (status != UCS_OK && status != UCS_INPROGRESS)
    die(std::string(what) + ": " + ucs_status_string(status));
}

inline void send_all(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n <= 0) die("socket send");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

inline void recv_all(int fd, void* data, size_t bytes) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n <= 0) die("socket recv: the peer went away");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

inline std::vector<char> exchange(int fd, const void* mine, size_t bytes) {
  const uint64_t size = bytes;
  send_all(fd, &size, sizeof(size));
  send_all(fd, mine, bytes);
  uint64_t theirs = 0;
  recv_all(fd, &theirs, sizeof(theirs));
  if (theirs > (1u << 20)) die("peer sent an oversized exchange");
  std::vector<char> data(theirs);
  recv_all(fd, data.data(), theirs);
  return data;
}

// One byte each way: both sides reached the same point. Progresses `worker`
// while it waits: over tcp, UCX completes the other side's puts (and their
// flush) only when this side progresses.
inline void sync(int fd, ucp_worker_h worker) {
  const char mine = 42;
  char theirs = 0;
  send_all(fd, &mine, 1);
  for (;;) {
    const ssize_t n = ::recv(fd, &theirs, 1, MSG_DONTWAIT);
    if (n == 1) break;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      die("socket recv: the peer went away");
    ucp_worker_progress(worker);
  }
  if (theirs != 42) die("sync byte");
}

inline int listen_and_accept(const char* port_file) {
  const int server = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(server, 8) != 0)
    die("listen");
  socklen_t len = sizeof(addr);
  ::getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string tmp = std::string(port_file) + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) die("cannot write the port file");
  std::fprintf(f, "%d\n", ntohs(addr.sin_port));
  std::fclose(f);
  std::rename(tmp.c_str(), port_file);
  const int fd = ::accept(server, nullptr, nullptr);
  ::close(server);
  if (fd < 0) die("accept");
  return fd;
}

inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("connect");
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// The process's UCX state, as the prototypes' globals.
struct Ucx {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_mem_h memory = nullptr;
  void* heap = nullptr;
  size_t heap_size = 0;

  explicit Ucx(size_t heap_bytes) : heap_size(heap_bytes) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA;
    check(ucp_init(&params, nullptr, &context), "ucp_init");
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.length = heap_bytes;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    check(ucp_mem_map(context, &mp, &memory), "ucp_mem_map");
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    check(ucp_mem_query(memory, &attr), "ucp_mem_query");
    heap = attr.address;
    std::memset(heap, 0, heap_size);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    check(ucp_worker_create(context, &wp, &worker), "ucp_worker_create");
  }
  Ucx(const Ucx&) = delete;
  Ucx& operator=(const Ucx&) = delete;
  ~Ucx() {
    ucp_worker_destroy(worker);
    ucp_mem_unmap(context, memory);
    ucp_cleanup(context);
  }
};

// The other process: an endpoint, its heap's rkey, and where its heap is.
struct Peer {
  int fd = -1;
  ucp_ep_h ep = nullptr;
  ucp_rkey_h rkey = nullptr;
  uint64_t heap = 0;

  Peer(Ucx& ucx, int socket) : fd(socket) {
    const uint64_t mine = reinterpret_cast<uintptr_t>(ucx.heap);
    const std::vector<char> theirs = exchange(fd, &mine, sizeof(mine));
    std::memcpy(&heap, theirs.data(), sizeof(heap));
    void* packed = nullptr;
    size_t packed_size = 0;
    check(ucp_rkey_pack(ucx.context, ucx.memory, &packed, &packed_size), "ucp_rkey_pack");
    const std::vector<char> rkey_bytes = exchange(fd, packed, packed_size);
    ucp_rkey_buffer_release(packed);
    ucp_address_t* address = nullptr;
    size_t address_size = 0;
    check(ucp_worker_get_address(ucx.worker, &address, &address_size), "worker address");
    const std::vector<char> their_address = exchange(fd, address, address_size);
    ucp_worker_release_address(ucx.worker, address);
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(their_address.data());
    check(ucp_ep_create(ucx.worker, &ep_params, &ep), "ucp_ep_create");
    check(ucp_ep_rkey_unpack(ep, rkey_bytes.data(), &rkey), "ucp_ep_rkey_unpack");
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() {
    if (rkey != nullptr) ucp_rkey_destroy(rkey);
    if (fd >= 0) ::close(fd);
  }

  // Where `local` (an address in our heap) is in theirs: the prototypes'
  // "ASLR difference".
  [[nodiscard]] uint64_t remote(const void* local, const void* our_heap) const {
    return heap + static_cast<uint64_t>(static_cast<const char*>(local) -
                                        static_cast<const char*>(our_heap));
  }
};

// Completes everything put to `ep` (or from the worker), progressing meanwhile.
inline ucs_status_t flush(ucp_worker_h worker, ucp_ep_h ep) {
  ucp_request_param_t param{};
  void* request =
      ep != nullptr ? ucp_ep_flush_nbx(ep, &param) : ucp_worker_flush_nbx(worker, &param);
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status;
  do {
    ucp_worker_progress(worker);
    status = ucp_request_check_status(request);
  } while (status == UCS_INPROGRESS);
  ucp_request_free(request);
  return status;
}

// flush() as a plain function: the target arguments the Three-Chains
// programs give their ifuncs carry it as a pointer.
inline ucs_status_t flush_ep(ucp_worker_h worker, ucp_ep_h ep) {
  return flush(worker, ep);
}

// Three-Chains' registration parameters for a library of this name.
inline ucp_ifunc_reg_param_t register_param(const char* name) {
  ucp_ifunc_reg_param_t p;
  p.name = const_cast<char*>(name);
  p.pure = 0;
  p.llvm_bc = 1;
  return p;
}

// Closes an endpoint, waiting (bounded by progress) for the close.
inline void close_ep(ucp_worker_h worker, ucp_ep_h ep) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* request = ucp_ep_close_nbx(ep, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker);
  ucp_request_free(request);
}

}  // namespace proto
