// A program in the shape of Three-Chains' contrib/ifunc/pointer_chase.cpp,
// written here against that prototype's API: a table of links sharded over
// the servers; the client sends a chase (the chaser ifunc) to the first
// server; each server follows the links it holds and sends the chase on to
// the server that holds the next one from inside the ifunc (X-RDMA, through
// ucp_ifunc_send_nbix), and the last one sends the result ifunc to the
// client. The client checks each result against the same walk done locally,
// then stops the servers with the stop ifunc. Builds with nothing but
// `-include threechains/ucp_ifunc.h`.
//
//   three_chains_pointer_chase [SERVERS [CHASES [DEPTH]]]   (UCX_IFUNC_LIB_DIR:
//   chaser, result, stop)
//
// The prototype was launched once per host; here the client forks the
// servers, and every pair of processes shares a socketpair for the set-up.
#include "bootstrap.hpp"
#include "ifuncs/three_chains/pointer_chase.h"

#include <sys/wait.h>

#include <chrono>
#include <cinttypes>
#include <memory>
#include <random>

namespace {

constexpr size_t kHeap = 1u << 20;
constexpr uint64_t kShardSize = 4096;
constexpr uint64_t kSeed = 20261125;

std::vector<uint64_t> make_table(int servers) {
  std::mt19937_64 random(kSeed);
  std::vector<uint64_t> table(static_cast<size_t>(servers) * kShardSize);
  for (uint64_t& link : table) link = random();
  return table;
}

struct Mesh {
  proto::Ucx ucx{kHeap};
  std::vector<std::unique_ptr<proto::Peer>> peers;  // by process; ours is null
  std::vector<ucp_ep_h> eps;
  std::vector<ucp_rkey_h> rkeys;
  std::vector<uint64_t> heaps;

  Mesh(int me, const std::vector<int>& fds) {
    const size_t n = fds.size();
    peers.resize(n);
    eps.assign(n, nullptr);
    rkeys.assign(n, nullptr);
    heaps.assign(n, 0);
    for (size_t j = 0; j < n; ++j) {
      if (static_cast<int>(j) == me) continue;
      peers[j] = std::make_unique<proto::Peer>(ucx, fds[j]);
      eps[j] = peers[j]->ep;
      rkeys[j] = peers[j]->rkey;
      heaps[j] = peers[j]->heap;
    }
    proto::check(proto::flush(ucx.worker, nullptr), "wire-up flush");
  }
  void sync_all() {
    for (auto& peer : peers)
      if (peer) proto::sync(peer->fd, ucx.worker);
  }
  ~Mesh() {
    for (auto& peer : peers)
      if (peer) proto::close_ep(ucx.worker, peer->ep);
    peers.clear();
    ucp_ifunc_context_release(ucx.context);
  }
};

int run_server(int me, int servers, const std::vector<int>& fds) {
  Mesh mesh(me, fds);
  const std::vector<uint64_t> table = make_table(servers);
  std::vector<uint64_t> shard(table.begin() + (me - 1) * kShardSize,
                              table.begin() + me * kShardSize);
  ucp_ifunc_h chaser = nullptr, result = nullptr;
  proto::check(ucp_register_ifunc(mesh.ucx.context, proto::register_param("chaser"), &chaser),
               "register chaser");
  proto::check(ucp_register_ifunc(mesh.ucx.context, proto::register_param("result"), &result),
               "register result");
  pc_tgt_args_t args{};
  args.shard_id = me - 1;
  args.data = shard.data();
  args.ep = mesh.eps.data();
  args.worker = mesh.ucx.worker;
  args.rkey = mesh.rkeys.data();
  args.remote_heap = mesh.heaps.data();
  args.flush = proto::flush_ep;
  args.servers = servers;
  args.shard_size = kShardSize;
  args.run = true;
  pc_src_args_t start{0, 0, 0};
  uint64_t zero = 0;
  proto::check(ucp_ifunc_msg_create(chaser, &start, sizeof(start), &args.chaser_msg), "chaser msg");
  proto::check(ucp_ifunc_msg_create(result, &zero, sizeof(zero), &args.result_msg), "result msg");
  mesh.sync_all();
  while (args.run) {
    const ucs_status_t s =
        ucp_poll_ifunc(mesh.ucx.context, mesh.ucx.heap, kHeap, &args, mesh.ucx.worker);
    if (s != UCS_OK && s != UCS_ERR_NO_MESSAGE) proto::die("server poll");
  }
  std::printf("server %d: forwarded %" PRIu64 " chases to another server\n", me, args.forwarded);
  std::fflush(stdout);
  ucp_ifunc_msg_free(args.chaser_msg);
  ucp_ifunc_msg_free(args.result_msg);
  ucp_deregister_ifunc(mesh.ucx.context, chaser);
  ucp_deregister_ifunc(mesh.ucx.context, result);
  mesh.sync_all();
  return servers > 1 && args.forwarded == 0 ? 1 : 0;
}

int run_client(int servers, int chases, uint64_t depth, const std::vector<int>& fds) {
  Mesh mesh(0, fds);
  const std::vector<uint64_t> table = make_table(servers);
  const uint64_t size = table.size();
  ucp_ifunc_h chaser = nullptr, result = nullptr, stop = nullptr;
  proto::check(ucp_register_ifunc(mesh.ucx.context, proto::register_param("chaser"), &chaser),
               "register chaser");
  proto::check(ucp_register_ifunc(mesh.ucx.context, proto::register_param("result"), &result),
               "register result");
  proto::check(ucp_register_ifunc(mesh.ucx.context, proto::register_param("stop"), &stop),
               "register stop");
  pc_src_args_t first{depth, 0, 0};
  ucp_ifunc_msg_t chase;
  proto::check(ucp_ifunc_msg_create(chaser, &first, sizeof(first), &chase), "chaser msg");
  void* payload = nullptr;
  size_t payload_size = 0;
  proto::check(ucp_ifunc_msg_get_payload_ptr(&chase, &payload, &payload_size), "payload ptr");
  if (payload_size != sizeof(pc_src_args_t)) proto::die("the chaser's payload has the wrong size");
  mesh.sync_all();
  std::mt19937_64 random(kSeed + 1);
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < chases; ++c) {
    const uint64_t from = random() % size;
    uint64_t expected = from;
    for (uint64_t d = 0; d < depth; ++d) expected = table[expected] % size;
    auto* args = static_cast<pc_src_args_t*>(payload);
    *args = {depth, from, 0};
    proto::check_put(ucp_ifunc_send_nbix(mesh.eps[1], chase, mesh.heaps[1], mesh.rkeys[1]),
                     "send chase");
    proto::check(proto::flush(mesh.ucx.worker, mesh.eps[1]), "flush");
    uint64_t got = UINT64_MAX;
    ucs_status_t s;
    do {
      s = ucp_poll_ifunc(mesh.ucx.context, mesh.ucx.heap, kHeap, &got, mesh.ucx.worker);
    } while (s == UCS_ERR_NO_MESSAGE);
    proto::check(s, "client poll");
    if (got != expected)
      proto::die("chase " + std::to_string(c) + " ended on " + std::to_string(got) + ", not " +
                 std::to_string(expected));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("pointer chase: %d chases of depth %" PRIu64
              " over %d servers, all correct, "
              "%.2f us a chase\n",
              chases, depth, servers, seconds * 1e6 / chases);
  ucp_ifunc_msg_t stop_msg;
  proto::check(ucp_ifunc_msg_create(stop, nullptr, sizeof(void*), &stop_msg), "stop msg");
  for (int i = 1; i <= servers; ++i) {
    proto::check_put(ucp_ifunc_send_nbix(mesh.eps[i], stop_msg, mesh.heaps[i], mesh.rkeys[i]),
                     "stop");
    proto::check(proto::flush(mesh.ucx.worker, mesh.eps[i]), "flush");
  }
  ucp_ifunc_msg_free(stop_msg);
  ucp_ifunc_msg_free(chase);
  ucp_deregister_ifunc(mesh.ucx.context, chaser);
  ucp_deregister_ifunc(mesh.ucx.context, result);
  ucp_deregister_ifunc(mesh.ucx.context, stop);
  mesh.sync_all();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int servers = argc > 1 ? std::atoi(argv[1]) : 2;
  const int chases = argc > 2 ? std::atoi(argv[2]) : 200;
  const uint64_t depth = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 64;
  if (servers < 1 || servers > 8 || chases < 1 || depth < 1) {
    std::fprintf(stderr, "usage: %s [SERVERS 1-8 [CHASES [DEPTH]]]\n", argv[0]);
    return 2;
  }
  const int processes = servers + 1;
  // fds[i][j]: process i's end of the socketpair it shares with process j.
  std::vector<std::vector<int>> fds(processes, std::vector<int>(processes, -1));
  for (int i = 0; i < processes; ++i) {
    for (int j = i + 1; j < processes; ++j) {
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) proto::die("socketpair");
      fds[i][j] = pair[0];
      fds[j][i] = pair[1];
    }
  }
  std::vector<pid_t> children;
  for (int me = 1; me <= servers; ++me) {
    const pid_t pid = ::fork();
    if (pid < 0) proto::die("fork");
    if (pid == 0) {
      for (int i = 0; i < processes; ++i)
        for (int j = 0; j < processes; ++j)
          if (i != me && fds[i][j] >= 0) ::close(fds[i][j]);
      std::fflush(stdout);
      std::_Exit(run_server(me, servers, fds[me]));
    }
    children.push_back(pid);
  }
  for (int i = 1; i < processes; ++i)
    for (int j = 0; j < processes; ++j)
      if (fds[i][j] >= 0) ::close(fds[i][j]);
  int rc = run_client(servers, chases, depth, fds[0]);
  for (const pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "FAILED: server process %d did not exit cleanly\n", pid);
      rc = 1;
    }
  }
  if (rc == 0) std::printf("pointer chase: OK\n");
  return rc;
}
