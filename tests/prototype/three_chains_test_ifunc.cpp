// A program in the shape of Three-Chains' contrib/ifunc/test_ifunc.cpp and
// lat_bw_test.cpp, written here against that prototype's API as its
// <ucp/api/ucp.h> declared it: ucp_register_ifunc with ucp_ifunc_reg_param_t,
// ucp_register_ifunc_im, the 5-argument ucp_poll_ifunc, and libraries with
// <name>_payload_bound and a payload_init that takes the source arguments
// first. It builds with nothing but `-include threechains/ucp_ifunc.h`.
//
//   three_chains_test_ifunc server PORTFILE  (UCX_IFUNC_LIB_DIR: pure, hello, b, p, importer)
//   three_chains_test_ifunc client PORT
//   IM_BITCODE=<im.c's bitcode for this triple> for ucp_register_ifunc_im
//
// In order: pure (the ifunc calls a target function passed as target_args),
// hello (prints, so both sides allow printf: THREECHAINS_IFUNC_ALLOW_IMPORTS),
// a library whose import the policy refuses (UCS_ERR_REJECTED), im (bitcode
// from memory), b over a ring (throughput) and back and forth (latency), and
// p, which sends itself back from inside the ifunc (ifunc-initiated ping-pong).
#include "bootstrap.hpp"
#include "ifuncs/three_chains/p.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <fstream>
#include <iterator>

namespace {

constexpr size_t kHeap = 8u << 20;
constexpr int kMaxPayloadLog = 16;
constexpr uint8_t kSignal = 0x3C;
constexpr uint64_t kImMessages = 10;

struct HelloResult {
  uint64_t fib;
  uint64_t payload_size;
  uint64_t pattern_ok;
};

// pure's target function: what it was called with.
struct PureCalls {
  int calls = 0;
  uint8_t values[8] = {};
  float floats[8] = {};
};
PureCalls pure_calls;
uint8_t pure_entry(uint8_t value, const float* f) {
  if (pure_calls.calls < 8) {
    pure_calls.values[pure_calls.calls] = value;
    pure_calls.floats[pure_calls.calls] = *f;
  }
  ++pure_calls.calls;
  return static_cast<uint8_t>(value + 1);
}

size_t slot_size(int payload_log) {
  return std::max<size_t>(1u << 14, (size_t{1} << payload_log) + (1u << 13));
}

void poll_until_ran(proto::Ucx& ucx, void* buffer, size_t size, void* target_args) {
  ucs_status_t s;
  do {
    s = ucp_poll_ifunc(ucx.context, buffer, size, target_args, ucx.worker);  // 5 arguments
  } while (s == UCS_ERR_NO_MESSAGE);
  proto::check(s, "ucp_poll_ifunc");
}

ucp_ifunc_h register_im(proto::Ucx& ucx) {
  const char* path = std::getenv("IM_BITCODE");
  if (path == nullptr) proto::die("IM_BITCODE is not set");
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  if (bytes.empty()) proto::die(std::string("cannot read ") + path);
  char triple[64];
  std::snprintf(triple, sizeof(triple), "%s", IM_TRIPLE);
  ucp_llvm_bc_t bc{triple, bytes.data(), static_cast<uint32_t>(bytes.size())};
  ucp_ifunc_h im = nullptr;
  proto::check(
      ucp_register_ifunc_im(ucx.context, proto::register_param("im"), &bc, 1, nullptr, 0, &im),
      "ucp_register_ifunc_im");
  return im;
}

p_args_t p_args_for(proto::Ucx& ucx, proto::Peer& peer, ucp_ifunc_msg_t msg, size_t to_send) {
  p_args_t args{};
  args.ep = peer.ep;
  args.msg = msg;
  args.remote_heap = peer.heap;
  args.rkey = peer.rkey;
  args.flush = proto::flush_ep;
  args.worker = ucx.worker;
  args.to_send = to_send;
  return args;
}

void refused_import(proto::Ucx& ucx) {
  ucp_ifunc_h importer = nullptr;
  const ucs_status_t s =
      ucp_register_ifunc(ucx.context, proto::register_param("importer"), &importer);
  std::printf("importer (imports getpid): %s\n", ucs_status_string(s));
  if (s != UCS_ERR_REJECTED || importer != nullptr)
    proto::die("a library importing getpid was not refused as a policy decision");
}

int run_server(proto::Ucx& ucx, proto::Peer& peer) {
  auto* heap = static_cast<uint8_t*>(ucx.heap);
  volatile uint8_t* signal = heap + kHeap - 1;

  poll_until_ran(ucx, heap, kHeap, reinterpret_cast<void*>(pure_entry));
  std::printf("pure ran: %d calls into the target, floats %.2f %.2f %.2f %.2f %.2f\n",
              pure_calls.calls, pure_calls.floats[0], pure_calls.floats[1], pure_calls.floats[2],
              pure_calls.floats[3], pure_calls.floats[4]);
  uint8_t x = 0;
  for (int i = 0; i < 256; ++i) x ^= static_cast<uint8_t>(i * 3);
  if (pure_calls.calls != 5 || pure_calls.values[0] != x || pure_calls.values[1] != x + 1 ||
      pure_calls.floats[0] != 3.5f || pure_calls.floats[1] != 1.25f ||
      pure_calls.floats[2] != 2.5f || pure_calls.floats[3] != -1.0f ||
      pure_calls.floats[4] != -2.0f)
    proto::die("pure did not call the target as its code says");
  proto::sync(peer.fd, ucx.worker);  // hello goes to the same place

  HelloResult hello{};
  poll_until_ran(ucx, heap, kHeap, &hello);
  std::fflush(stdout);
  if (hello.fib != 2626 || hello.payload_size != 2626 || hello.pattern_ok != 1)
    proto::die("hello's payload was not built as its library says");
  refused_import(ucx);

  ucp_ifunc_h im = register_im(ucx);
  proto::sync(peer.fd, ucx.worker);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < kImMessages; ++i) {
    poll_until_ran(ucx, heap, kHeap, &sum);
    if (i + 1 < kImMessages)
      proto::sync(peer.fd, ucx.worker);  // the next one goes to the same place
  }
  std::printf("im ran %" PRIu64 " times, sum %" PRIu64 "\n", kImMessages, sum);
  if (sum != kImMessages * (kImMessages + 1) / 2) proto::die("im's sum is wrong");
  ucp_deregister_ifunc(ucx.context, im);
  proto::sync(peer.fd, ucx.worker);

  ucp_ifunc_h b_own = nullptr;  // registered before its frames come, as the prototype's server
  proto::check(ucp_register_ifunc(ucx.context, proto::register_param("b"), &b_own), "register b");
  for (int log = 0; log <= kMaxPayloadLog; ++log) {  // throughput
    const size_t slot = slot_size(log);
    const size_t slots = kHeap / slot - 1;
    const size_t messages = std::max<size_t>(2000, slots * 4);
    size_t counter = 0;
    proto::sync(peer.fd, ucx.worker);
    for (size_t i = 0; i < messages; ++i) {
      poll_until_ran(ucx, heap + (i % slots) * slot, slot, &counter);
      if ((i + 1) % slots == 0 || i + 1 == messages) {
        *signal = kSignal;
        proto::check_put(ucp_put_nbi(peer.ep, const_cast<uint8_t*>(signal), 1,
                                     peer.remote(const_cast<uint8_t*>(signal), heap), peer.rkey),
                         "signal put");
        proto::check(proto::flush(ucx.worker, peer.ep), "flush");
      }
    }
    if (counter != messages) proto::die("b ran " + std::to_string(counter) + " times");
  }
  ucp_ifunc_h b = b_own;
  for (int log = 0; log <= kMaxPayloadLog; log += 4) {  // latency
    const size_t rounds = log > 12 ? 200 : 2000;
    size_t counter = 0;
    ucp_ifunc_msg_t msg;
    proto::check(ucp_ifunc_msg_create(b, nullptr, size_t{1} << log, &msg), "msg_create");
    proto::sync(peer.fd, ucx.worker);
    for (size_t i = 0; i < rounds; ++i) {
      poll_until_ran(ucx, heap, slot_size(log), &counter);
      proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg, peer.heap, peer.rkey), "send");
      proto::check(proto::flush(ucx.worker, peer.ep), "flush");
    }
    ucp_ifunc_msg_free(msg);
    if (counter != rounds) proto::die("ping-pong: b ran " + std::to_string(counter) + " times");
  }
  ucp_deregister_ifunc(ucx.context, b);

  ucp_ifunc_h p = nullptr;  // ifunc-initiated ping-pong: p answers from inside itself
  proto::check(ucp_register_ifunc(ucx.context, proto::register_param("p"), &p), "register p");
  ucp_ifunc_msg_t pm;
  proto::check(ucp_ifunc_msg_create(p, nullptr, 8, &pm), "msg_create p");
  constexpr size_t kRounds = 2000;
  p_args_t args = p_args_for(ucx, peer, pm, kRounds);
  proto::sync(peer.fd, ucx.worker);
  while (args.counter < kRounds) poll_until_ran(ucx, heap, slot_size(3), &args);
  ucp_ifunc_msg_free(pm);
  ucp_deregister_ifunc(ucx.context, p);
  proto::sync(peer.fd, ucx.worker);
  std::printf("server: OK\n");
  return 0;
}

int run_client(proto::Ucx& ucx, proto::Peer& peer) {
  auto* heap = static_cast<uint8_t*>(ucx.heap);
  volatile uint8_t* signal = heap + kHeap - 1;
  ucp_ifunc_msg_t msg;

  std::vector<uint8_t> bytes(256);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 3);
  ucp_ifunc_h pure = nullptr;
  proto::check(ucp_register_ifunc(ucx.context, proto::register_param("pure"), &pure),
               "register pure");
  proto::check(ucp_ifunc_msg_create(pure, bytes.data(), bytes.size(), &msg), "msg_create pure");
  proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg, peer.heap, peer.rkey), "send pure");
  proto::check(proto::flush(ucx.worker, peer.ep), "flush");
  ucp_ifunc_msg_free(msg);
  ucp_deregister_ifunc(ucx.context, pure);
  proto::sync(peer.fd, ucx.worker);

  std::vector<uint8_t> pattern(4096);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 1);
  ucp_ifunc_h hello = nullptr;
  proto::check(ucp_register_ifunc(ucx.context, proto::register_param("hello"), &hello),
               "register hello");
  proto::check(ucp_ifunc_msg_create(hello, pattern.data(), pattern.size(), &msg), "msg_create");
  std::printf("sending hello, frame %zu bytes (code included)\n", msg.frame_size);
  proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg, peer.heap, peer.rkey), "send hello");
  proto::check(proto::flush(ucx.worker, peer.ep), "flush");
  ucp_ifunc_msg_free(msg);
  ucp_deregister_ifunc(ucx.context, hello);
  refused_import(ucx);

  ucp_ifunc_h im = register_im(ucx);
  proto::sync(peer.fd, ucx.worker);
  for (uint64_t i = 1; i <= kImMessages; ++i) {
    proto::check(ucp_ifunc_msg_create(im, &i, sizeof(i), &msg), "msg_create im");
    proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg, peer.heap, peer.rkey), "send im");
    proto::check(proto::flush(ucx.worker, peer.ep), "flush");
    ucp_ifunc_msg_free(msg);
    if (i < kImMessages) proto::sync(peer.fd, ucx.worker);  // the next one goes to the same place
  }
  ucp_deregister_ifunc(ucx.context, im);
  proto::sync(peer.fd, ucx.worker);

  ucp_ifunc_h b = nullptr;
  proto::check(ucp_register_ifunc(ucx.context, proto::register_param("b"), &b), "register b");
  std::printf("\nthroughput (b, ring of slots)\n");
  for (int log = 0; log <= kMaxPayloadLog; ++log) {
    const size_t slot = slot_size(log);
    const size_t slots = kHeap / slot - 1;
    const size_t messages = std::max<size_t>(2000, slots * 4);
    proto::check(ucp_ifunc_msg_create(b, nullptr, size_t{1} << log, &msg), "msg_create");
    *signal = 0;
    proto::sync(peer.fd, ucx.worker);
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < messages; ++i) {
      proto::check_put(ucp_ifunc_send_nbix(peer.ep, msg,
                                           peer.remote(heap + (i % slots) * slot, heap), peer.rkey),
                       "send b");
      if ((i + 1) % slots == 0 || i + 1 == messages) {
        proto::check(proto::flush(ucx.worker, peer.ep), "flush");
        while (*signal != kSignal) ucp_worker_progress(ucx.worker);
        *signal = 0;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%7zu B: %.3e messages/s\n", size_t{1} << log,
                static_cast<double>(messages) / seconds);
    ucp_ifunc_msg_free(msg);
  }

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
      poll_until_ran(ucx, heap, slot_size(log), &counter);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%7zu B: %.3f us round trip\n", size_t{1} << log, seconds * 1e6 / rounds);
    ucp_ifunc_msg_free(msg);
    if (counter != rounds)
      proto::die("ping-pong: b came back " + std::to_string(counter) + " times");
  }
  ucp_deregister_ifunc(ucx.context, b);

  ucp_ifunc_h p = nullptr;
  proto::check(ucp_register_ifunc(ucx.context, proto::register_param("p"), &p), "register p");
  ucp_ifunc_msg_t pm;
  proto::check(ucp_ifunc_msg_create(p, nullptr, 8, &pm), "msg_create p");
  constexpr size_t kRounds = 2000;
  // The client starts each exchange; the server's p answers from inside itself.
  p_args_t args = p_args_for(ucx, peer, pm, 0);
  proto::sync(peer.fd, ucx.worker);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kRounds; ++i) {
    proto::check_put(ucp_ifunc_send_nbix(peer.ep, pm, peer.heap, peer.rkey), "send p");
    proto::check(proto::flush(ucx.worker, peer.ep), "flush");
    poll_until_ran(ucx, heap, slot_size(3), &args);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\nifunc-initiated ping-pong (p): %.3f us round trip\n", seconds * 1e6 / kRounds);
  if (args.counter != kRounds) proto::die("p came back " + std::to_string(args.counter) + " times");
  ucp_ifunc_msg_free(pm);
  ucp_deregister_ifunc(ucx.context, p);
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
