// A program in the shape of Two-Chains' contrib/ifunc/test_ifunc.cpp, written
// here against that prototype's API as its <ucp/api/ucp.h> declared it:
// ucp_register_ifunc by name, the 4-argument ucp_poll_ifunc (no worker), and
// libraries with <name>_payload_get_max_size and a payload_init that takes
// the payload first. It builds with nothing but
// `-include threechains/ucp_ifunc.h` (and -DTHREECHAINS_UCP_IFUNC_TWO_CHAINS
// for libraries without bitcode).
//
//   two_chains_test_ifunc server PORTFILE   (UCX_IFUNC_LIB_DIR: hello.tcc, b.tcc)
//   two_chains_test_ifunc client PORT
//
// The client sends hello (a payload the library builds from a pattern), then
// b over a ring of slots for throughput, then b back and forth (ping-pong);
// both sides check every count. Slots are 4 KiB at least, not the
// prototype's 1 KiB: the first message of an ifunc to an endpoint carries its
// code (b's container is ~3 KiB of bitcode), later ones only the payload.
#include "bootstrap.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>

namespace {

constexpr size_t kHeap = 8u << 20;
constexpr int kMaxPayloadLog = 16;
constexpr uint8_t kSignal = 0x3C;

struct HelloResult {
  uint64_t fib;
  uint64_t payload_size;
  uint64_t pattern_ok;
};

size_t slot_size(int payload_log) {
  return std::max<size_t>(4096, size_t{2} << payload_log);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void poll_until_ran(ucp_context_h context, void* buffer, size_t size, void* target_args) {
  ucs_status_t s;
  do {
    s = ucp_poll_ifunc(context, buffer, size, target_args);  // Two-Chains: 4 arguments
  } while (s == UCS_ERR_NO_MESSAGE);
  proto::check(s, "ucp_poll_ifunc");
}

int run_server(proto::Ucx& ucx, proto::Peer& peer) {
  auto* heap = static_cast<uint8_t*>(ucx.heap);
  volatile uint8_t* signal = heap + kHeap - 1;
  HelloResult hello{};
  poll_until_ran(ucx.context, heap, kHeap, &hello);
  std::printf("hello ran: fib(17) + 42 = %" PRIu64 ", payload %" PRIu64 " bytes, pattern %s\n",
              hello.fib, hello.payload_size, hello.pattern_ok ? "intact" : "WRONG");
  if (hello.fib != 2626 || hello.payload_size != 2626 || hello.pattern_ok != 1)
    proto::die("hello's payload was not built as its library says");
  proto::sync(peer.fd, ucx.worker);

  std::printf("\nthroughput (b, ring of slots)\n");
  for (int log = 0; log <= kMaxPayloadLog; ++log) {
    const size_t slot = slot_size(log);
    const size_t slots = kHeap / 2 / slot;
    const size_t messages = std::max<size_t>(2000, slots * 2);
    size_t counter = 0;
    proto::sync(peer.fd, ucx.worker);
    for (size_t i = 0; i < messages; ++i) {
      poll_until_ran(ucx.context, heap + (i % slots) * slot, slot, &counter);
      if ((i + 1) % slots == 0 || i + 1 == messages) {  // the ring is free again
        *signal = kSignal;
        proto::check_put(ucp_put_nbi(peer.ep, const_cast<uint8_t*>(signal), 1,
                                     peer.remote(const_cast<uint8_t*>(signal), heap), peer.rkey),
                         "signal put");
        proto::check(proto::flush(ucx.worker, peer.ep), "flush");
      }
    }
    if (counter != messages)
      proto::die("b ran " + std::to_string(counter) + " times, not " + std::to_string(messages));
  }
  proto::sync(peer.fd, ucx.worker);

  ucp_ifunc_h b = nullptr;
  proto::check(ucp_register_ifunc(ucx.context, "b", &b), "register b");
  for (int log = 0; log <= kMaxPayloadLog; log += 4) {
    const size_t rounds = log > 12 ? 200 : 2000;
    size_t counter = 0;
    ucp_ifunc_msg_t msg;
    proto::check(ucp_ifunc_msg_create(b, nullptr, size_t{1} << log, &msg), "msg_create");
    proto::sync(peer.fd, ucx.worker);
    for (size_t i = 0; i < rounds; ++i) {
      poll_until_ran(ucx.context, heap, slot_size(log), &counter);
      proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg, peer.heap, peer.rkey), "send");
      proto::check(proto::flush(ucx.worker, peer.ep), "flush");
    }
    ucp_ifunc_msg_free(msg);
    if (counter != rounds) proto::die("ping-pong: b ran " + std::to_string(counter) + " times");
  }
  ucp_deregister_ifunc(ucx.context, b);
  proto::sync(peer.fd, ucx.worker);
  std::printf("server: OK\n");
  return 0;
}

int run_client(proto::Ucx& ucx, proto::Peer& peer) {
  auto* heap = static_cast<uint8_t*>(ucx.heap);
  volatile uint8_t* signal = heap + kHeap - 1;
  std::vector<uint8_t> pattern(4096);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 1);

  ucp_ifunc_h hello = nullptr;
  proto::check(ucp_register_ifunc(ucx.context, "hello", &hello), "register hello");
  ucp_ifunc_msg_t msg;
  proto::check(ucp_ifunc_msg_create(hello, pattern.data(), pattern.size(), &msg), "msg_create");
  std::printf("sending hello, frame %zu bytes (code included)\n", msg.frame_size);
  proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg, peer.heap, peer.rkey), "send hello");
  proto::check(proto::flush(ucx.worker, peer.ep), "flush");
  ucp_ifunc_msg_free(msg);
  ucp_deregister_ifunc(ucx.context, hello);
  proto::sync(peer.fd, ucx.worker);

  ucp_ifunc_h b = nullptr;
  proto::check(ucp_register_ifunc(ucx.context, "b", &b), "register b");
  std::printf("\nthroughput (b, ring of slots)\n");
  for (int log = 0; log <= kMaxPayloadLog; ++log) {
    const size_t slot = slot_size(log);
    const size_t slots = kHeap / 2 / slot;
    const size_t messages = std::max<size_t>(2000, slots * 2);
    // NULL source arguments and a size: b's payload functions make the payload.
    proto::check(ucp_ifunc_msg_create(b, nullptr, size_t{1} << log, &msg), "msg_create");
    *signal = 0;
    proto::sync(peer.fd, ucx.worker);
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < messages; ++i) {
      proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg,
                                           peer.remote(heap + (i % slots) * slot, heap), peer.rkey),
                       "send b");
      if ((i + 1) % slots == 0 || i + 1 == messages) {  // wait for the server to drain the ring
        proto::check(proto::flush(ucx.worker, peer.ep), "flush");
        while (*signal != kSignal) ucp_worker_progress(ucx.worker);
        *signal = 0;
      }
    }
    const double seconds = seconds_since(start);
    std::printf("%7zu B (frame %6zu): %.3e messages/s\n", size_t{1} << log, msg.frame_size,
                static_cast<double>(messages) / seconds);
    ucp_ifunc_msg_free(msg);
  }
  proto::sync(peer.fd, ucx.worker);

  std::printf("\nping-pong (b)\n");
  for (int log = 0; log <= kMaxPayloadLog; log += 4) {
    const size_t rounds = log > 12 ? 200 : 2000;
    size_t counter = 0;
    proto::check(ucp_ifunc_msg_create(b, nullptr, size_t{1} << log, &msg), "msg_create");
    proto::sync(peer.fd, ucx.worker);
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < rounds; ++i) {
      proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg, peer.heap, peer.rkey), "send b");
      proto::check(proto::flush(ucx.worker, peer.ep), "flush");
      poll_until_ran(ucx.context, heap, slot_size(log), &counter);
    }
    const double seconds = seconds_since(start);
    std::printf("%7zu B: %.3f us round trip\n", size_t{1} << log, seconds * 1e6 / rounds);
    ucp_ifunc_msg_free(msg);
    if (counter != rounds)
      proto::die("ping-pong: b came back " + std::to_string(counter) + " times");
  }
  ucp_deregister_ifunc(ucx.context, b);
  proto::sync(peer.fd, ucx.worker);
  std::printf("client: OK\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "server") != 0 && std::strcmp(argv[1], "client") != 0)) {
    std::fprintf(stderr, "usage: %s server PORTFILE | client PORT\n", argv[0]);
    return 2;
  }
  const bool server = std::strcmp(argv[1], "server") == 0;
  proto::Ucx ucx(kHeap);
  int rc = 0;
  {
    proto::Peer peer(
        ucx, server ? proto::listen_and_accept(argv[2]) : proto::connect_to(std::atoi(argv[2])));
    proto::check(proto::flush(ucx.worker, nullptr), "wire-up flush");
    proto::sync(peer.fd, ucx.worker);
    rc = server ? run_server(ucx, peer) : run_client(ucx, peer);
    proto::close_ep(ucx.worker, peer.ep);
  }
  ucp_ifunc_context_release(ucx.context);
  return rc;
}
