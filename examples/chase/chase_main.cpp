// threechains-chase: the distributed adaptive pointer chase (X-RDMA).
//
// A table of 2^k 64-bit entries forms one random cycle (fixed seed) and is
// sharded evenly over N server processes. The client (rank 0; servers are
// ranks 1..N, all connected all-to-all through UCX's listener) runs chases of
// depth D, one at a time, four ways:
//   ifunc-bitcode / ifunc-binary  the Chaser ifunc follows pointers on the
//       server that owns them and forwards itself when the next entry is
//       elsewhere; ReturnResult brings the answer home. Nothing is deployed on
//       the servers beforehand: the code travels with the first frames.
//   am    the same logic as a UCX Active Message handler registered on the
//         servers, forwarding with ucp_am_send_nbx
//   get   the client walks alone, one ucp_get_nbx per step from the owning shard
// Every chase's result is checked against a local walk of the same table.
#include "chase.h"

#include <threechains/threechains.hpp>

#include <threechains/launch.hpp>

#include <fmt/core.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;

namespace {

constexpr unsigned kAmChase = 0x7E01;        // client/server -> server: a chase_request
constexpr unsigned kAmChaseResult = 0x7E02;  // server -> client: a chase_result
constexpr unsigned kAmShardQuery = 0x7E03;   // client -> server: where is your shard?
constexpr unsigned kAmShardInfo = 0x7E04;    // server -> client: {address, base, per}, rkey as data

struct Options {
  std::vector<std::string> transports{"shm", "tcp"};
  std::vector<int64_t> servers{1, 2, 4};
  std::vector<std::string> modes{"ifunc-bitcode", "ifunc-binary", "am", "get"};
  uint64_t min_depth = 1;
  uint64_t max_depth = 4096;
  unsigned log_entries = 16;
  uint64_t chases = 20;
  unsigned rounds = 3;
  uint64_t seed = 20260101;
  std::string json;
  std::string chaser_bitcode = THREECHAINS_CHASER_BITCODE;
  std::string chaser_binary = THREECHAINS_CHASER_BINARY;
  std::string result_bitcode = THREECHAINS_RESULT_BITCODE;
  std::string result_binary = THREECHAINS_RESULT_BINARY;
};

// One random cycle over all entries (Sattolo's algorithm, fixed seed).
std::vector<uint64_t> make_table(unsigned log_entries, uint64_t seed) {
  std::vector<uint64_t> next(uint64_t{1} << log_entries);
  for (uint64_t i = 0; i < next.size(); ++i) next[i] = i;
  std::mt19937_64 rng(seed);
  for (uint64_t i = next.size() - 1; i > 0; --i) {
    std::uniform_int_distribution<uint64_t> pick(0, i - 1);
    std::swap(next[i], next[pick(rng)]);
  }
  return next;
}

// ---- servers --------------------------------------------------------------

// A message the AM handler queues for the loop to send. Fixed-size, so the
// baseline's hot path allocates nothing (the ifunc path reuses its buffers too).
struct Forward {
  int64_t rank;
  unsigned id;
  std::size_t size;
  std::array<std::byte, sizeof(chase_request)> bytes;
};
static_assert(sizeof(chase_result) <= sizeof(chase_request));

struct ServerState {
  chase_shard shard{};
  std::vector<Forward> forwards;  // AM mode: queued by the handler, sent by the loop
  ucp_ep_h query_ep = nullptr;
};

// The AM-mode chaser: the same walk as chaser.c, as a pre-registered handler.
ucs_status_t on_am_chase(void* arg, const void* header, std::size_t header_length, void*,
                         std::size_t, const ucp_am_recv_param_t*) {
  auto* s = static_cast<ServerState*>(arg);
  if (header_length != sizeof(chase_request)) return UCS_OK;
  chase_request r;
  std::memcpy(&r, header, sizeof(r));
  const int64_t me = 1 + static_cast<int64_t>(s->shard.base / s->shard.per_server);
  while (r.remaining > 0 && chase_owner_rank(&s->shard, r.index) == me) {
    r.index = s->shard.entries[r.index - s->shard.base];
    r.remaining--;
  }
  Forward f{};
  if (r.remaining == 0) {
    const chase_result done{r.id, r.index};
    f.rank = r.client;
    f.id = kAmChaseResult;
    f.size = sizeof(done);
    std::memcpy(f.bytes.data(), &done, sizeof(done));
  } else {
    f.rank = chase_owner_rank(&s->shard, r.index);
    f.id = kAmChase;
    f.size = sizeof(r);
    std::memcpy(f.bytes.data(), &r, sizeof(r));
  }
  s->forwards.push_back(f);  // capacity is reserved up front
  return UCS_OK;
}

ucs_status_t on_shard_query(void* arg, const void*, std::size_t, void*, std::size_t,
                            const ucp_am_recv_param_t* p) {
  if ((p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0)
    static_cast<ServerState*>(arg)->query_ep = p->reply_ep;
  return UCS_OK;
}

void send_am(const tc::Worker& worker, ucp_ep_h ep, unsigned id, const void* header,
             std::size_t header_length, const void* data = nullptr, std::size_t length = 0) {
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
  tc::Request request(ucp_am_send_nbx(ep, id, header, header_length, data, length, &params),
                      "ucp_am_send_nbx(chase)");
  tc::check(request.wait(worker, std::chrono::seconds(10)), "ucp_am_send_nbx(chase)");
}

// Serves chases until `stop()` (asked every 256 rounds) says so.
// One round of a server: frames and AMs in, the AM mode's forwards out.
// `idle` counts empty rounds: more ranks than cores, and a server with nothing
// to do gives its core away quickly, or the rank that holds the chase waits
// for a time slice.
void server_round(tc::Node& node, ServerState& state, unsigned& idle) {
  const bool worked = node.poll() != 0 || !state.forwards.empty();
  for (Forward& f : state.forwards) {
    send_am(node.worker(), node.channel(f.rank).endpoint().handle(), f.id, f.bytes.data(), f.size);
  }
  state.forwards.clear();
  if (worked) {
    idle = 0;
  } else if (++idle >= 16) {
    idle = 0;
    sched_yield();
  }
}

// Every rank proves the build's development key (which also signed the
// Chaser and ReturnResult) and accepts only ranks that prove it.
tc::NodeOptions mesh_options(void* target_args) {
  const tc::KeyPair key = tc::KeyPair::load(THREECHAINS_DEV_KEY);
  tc::NodeOptions options;
  options.receiver.trust =
      tc::Trust().allow_peer(key.public_key()).allow_native_code_signer(key.public_key());
  options.receiver.target_args = target_args;
  options.channel.identity = key;
  // Request-reply between ranks: replies carry the credits (docs/design.md).
  options.defer_credits = true;
  return options;
}

// How a rank gets its Node: made here and connected by hand (the forked
// mesh), or bootstrapped from the launcher that started the job (mpirun).
// `prepare` must run on the Node before it connects.
using MakeNode =
    std::function<tc::Node(tc::NodeOptions, const std::function<void(tc::Node&)>& prepare)>;

// A node made here, not yet connected.
MakeNode unconnected_node(tc::Worker worker, int64_t rank, int64_t ranks) {
  return [=](tc::NodeOptions options, const std::function<void(tc::Node&)>& prepare) {
    tc::Node node(worker, rank, ranks, std::move(options));
    prepare(node);
    return node;
  };
}

// A server rank from construction to the end: shard, handlers, serve.
struct Server {
  Server(const tc::Worker& worker, int64_t rank, int64_t ranks, const std::vector<uint64_t>& table,
         const MakeNode& make_node)
      : per(table.size() / static_cast<uint64_t>(ranks - 1)),
        base(static_cast<uint64_t>(rank - 1) * per),
        // The shard lives in UCX-allocated memory, so the GET baseline can read it.
        shard(worker.context(), per * sizeof(uint64_t)),
        node(make_node(mesh_options(&state), [this, &table](tc::Node& fresh) {
          // Frames may arrive as soon as we connect: everything is in place before.
          std::memcpy(shard.data(), table.data() + base, per * sizeof(uint64_t));
          state.forwards.reserve(64);
          state.shard = {reinterpret_cast<const uint64_t*>(shard.data()), base, per,
                         fresh.ranks() - 1};
          fresh.expose("chase_shard", &state.shard);
          fresh.worker().set_am_handler(kAmChase, &on_am_chase, &state);
          fresh.worker().set_am_handler(kAmShardQuery, &on_shard_query, &state);
        })) {}

  // Answers the GET baseline's question once it is asked (by the client).
  void answer_shard_query();
  // Serves a connected mesh until `stop()`, then closes.
  void serve(const std::function<bool()>& stop);
  void round() { server_round(node, state, idle); }

  unsigned idle = 0;
  ServerState state;
  uint64_t per;
  uint64_t base;
  tc::MemoryRegion shard;
  tc::Node node;
};

// ---- the client --------------------------------------------------------------

struct ClientState {
  chase_results results{};   // filled by the ReturnResult ifunc
  uint64_t am_received = 0;  // filled by the AM result handler
  chase_result am_last{};
  struct ShardInfo {
    uint64_t address, base, per;
  };
  std::map<ucp_ep_h, std::pair<ShardInfo, std::vector<std::byte>>> shard_info;
};

ucs_status_t on_am_result(void* arg, const void* header, std::size_t header_length, void*,
                          std::size_t, const ucp_am_recv_param_t*) {
  auto* c = static_cast<ClientState*>(arg);
  if (header_length == sizeof(chase_result)) {
    std::memcpy(&c->am_last, header, sizeof(chase_result));
    ++c->am_received;
  }
  return UCS_OK;
}

ucs_status_t on_shard_info(void* arg, const void* header, std::size_t header_length, void* data,
                           std::size_t length, const ucp_am_recv_param_t* p) {
  auto* c = static_cast<ClientState*>(arg);
  if (header_length != sizeof(ClientState::ShardInfo) ||
      (p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) {
    return UCS_OK;
  }
  ClientState::ShardInfo info;
  std::memcpy(&info, header, sizeof(info));
  c->shard_info[p->reply_ep] = {
      info, std::vector<std::byte>(static_cast<const std::byte*>(data),
                                   static_cast<const std::byte*>(data) + length)};
  return UCS_OK;
}

struct Measurement {
  std::string transport, mode;
  int64_t servers;
  uint64_t depth;
  double us_per_chase;
  bool correct;
};

void Server::answer_shard_query() {
  const ClientState::ShardInfo info{shard.address(), base, per};
  const std::vector<std::byte> rkey = shard.pack_rkey();
  while (state.query_ep == nullptr) node.poll();
  send_am(node.worker(), state.query_ep, kAmShardInfo, &info, sizeof(info), rkey.data(),
          rkey.size());
}

void Server::serve(const std::function<bool()>& stop) {
  answer_shard_query();
  for (uint64_t rounds = 0;; ++rounds) {
    round();
    if ((rounds & 0xff) == 0 && stop()) break;
  }
  node.close();
}

std::vector<Measurement> run_client(tc::Node& node, ClientState& client, const Options& o,
                                    const std::vector<uint64_t>& table,
                                    const std::string& transport_name);

// The client rank, ready to connect.
struct Client {
  explicit Client(const MakeNode& make_node)
      : node(make_node(mesh_options(&state), [this](tc::Node& fresh) {
          fresh.expose("chase_results", &state.results);
          fresh.worker().set_am_handler(kAmChaseResult, &on_am_result, &state);
          fresh.worker().set_am_handler(kAmShardInfo, &on_shard_info, &state);
        })) {}
  ClientState state;
  tc::Node node;
};

// The GET baseline needs remote memory access (ContextOptions::remote_memory_access),
// which a Receiver exposed to untrusted peers leaves off: over tcp it lets any
// peer read and write the process. The chase asks for it only when it runs GETs.
tc::ContextOptions chase_context(const Options& o, tc::Transport transport) {
  const bool gets = std::find(o.modes.begin(), o.modes.end(), "get") != o.modes.end();
  return {.transport = transport, .remote_memory_access = gets};
}

// ---- one mesh: N servers in child processes, the client here -------------------

std::vector<Measurement> run_mesh(const Options& o, const std::string& transport_name,
                                  int64_t servers) {
  const tc::Transport transport = tc::parse_transport(transport_name);
  const int64_t ranks = servers + 1;
  const std::vector<uint64_t> table = make_table(o.log_entries, o.seed);
  struct Child {
    pid_t pid;
    int from, to;
  };
  std::vector<Child> children;
  for (int64_t r = 1; r < ranks; ++r) {
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) throw std::runtime_error("pipe");
    const pid_t pid = fork();
    if (pid == 0) {
      close(up[0]);
      close(down[1]);
      int rc = 0;
      try {
        const tc::Worker worker(tc::Context(chase_context(o, transport)));
        Server server(worker, r, ranks, table, unconnected_node(worker, r, ranks));
        const uint16_t port = server.node.port();
        if (write(up[1], &port, sizeof(port)) != sizeof(port)) throw std::runtime_error("pipe");
        std::vector<uint16_t> ports(static_cast<std::size_t>(ranks));
        if (read(down[0], ports.data(), ports.size() * 2) !=
            static_cast<ssize_t>(ports.size() * 2)) {
          throw std::runtime_error("pipe");
        }
        std::vector<tc::NodeAddress> addresses;
        for (uint16_t p : ports) addresses.push_back({"127.0.0.1", p});
        const int commands = down[0];
        server.node.connect(addresses);
        server.serve([commands] {
          pollfd p{commands, POLLIN, 0};
          return ::poll(&p, 1, 0) == 1;
        });
      } catch (const std::exception& e) {
        fmt::print(stderr, "chase server {}: {}\n", r, e.what());
        rc = 1;
      }
      _exit(rc);
    }
    close(up[1]);
    close(down[0]);
    children.push_back({pid, up[0], down[1]});
  }

  Client client(unconnected_node(tc::Worker(tc::Context(chase_context(o, transport))), 0, ranks));
  tc::Node& node = client.node;
  std::vector<uint16_t> ports{node.port()};
  for (const Child& c : children) {
    uint16_t port = 0;
    if (read(c.from, &port, sizeof(port)) != sizeof(port))
      throw std::runtime_error("a server did not start");
    ports.push_back(port);
  }
  for (const Child& c : children) {
    if (write(c.to, ports.data(), ports.size() * 2) != static_cast<ssize_t>(ports.size() * 2)) {
      throw std::runtime_error("pipe");
    }
  }
  std::vector<tc::NodeAddress> addresses;
  for (uint16_t p : ports) addresses.push_back({"127.0.0.1", p});
  node.connect(addresses);

  std::vector<Measurement> out = run_client(node, client.state, o, table, transport_name);

  for (const Child& c : children) {
    const char q = 'q';
    if (write(c.to, &q, 1) != 1) throw std::runtime_error("pipe");
  }
  node.close();
  bool servers_ok = true;
  for (const Child& c : children) {
    int status = 0;
    while (waitpid(c.pid, &status, WNOHANG) == 0) node.worker().progress();
    servers_ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    close(c.from);
    close(c.to);
  }
  if (!servers_ok) throw std::runtime_error("a chase server failed");
  return out;
}

std::vector<Measurement> run_client(tc::Node& node, ClientState& client, const Options& o,
                                    const std::vector<uint64_t>& table,
                                    const std::string& transport_name) {
  const int64_t ranks = node.ranks();
  const int64_t servers = ranks - 1;
  const uint64_t per = table.size() / static_cast<uint64_t>(servers);
  // GET baseline: every server's shard as a RemoteBuffer.
  for (int64_t r = 1; r < ranks; ++r)
    send_am(node.worker(), node.channel(r).endpoint().handle(), kAmShardQuery, nullptr, 0);
  while (client.shard_info.size() < static_cast<std::size_t>(servers)) node.poll();
  std::vector<std::optional<tc::RemoteBuffer>> shards(static_cast<std::size_t>(ranks));
  for (int64_t r = 1; r < ranks; ++r) {
    const tc::Endpoint& ep = node.channel(r).endpoint();
    const auto& [info, rkey] = client.shard_info.at(ep.handle());
    shards[r].emplace(ep, info.address, info.per * sizeof(uint64_t), rkey);
  }

  const tc::Ifunc chaser_bc = tc::Ifunc::load(o.chaser_bitcode);
  const tc::Ifunc chaser_bin = tc::Ifunc::load(o.chaser_binary);
  const tc::Ifunc result_bc = tc::Ifunc::load(o.result_bitcode);
  const tc::Ifunc result_bin = tc::Ifunc::load(o.result_binary);
  const chase_shard layout{nullptr, 0, per, servers};

  std::vector<Measurement> out;
  uint64_t next_id = 1;
  uint64_t next_start = 0;
  // Where the next chases start and where a local walk of the table ends them:
  // computed before the clock starts, so the client's own walk is not timed.
  struct Chase {
    uint64_t first;
    uint64_t expected;
  };
  const auto plan = [&](uint64_t count, uint64_t depth) {
    std::vector<Chase> chases(count);
    for (Chase& c : chases) {
      c.first = (next_start++ * 0x9E3779B97F4A7C15ULL) % table.size();
      c.expected = c.first;
      for (uint64_t d = 0; d < depth; ++d) c.expected = table[c.expected];
    }
    return chases;
  };
  // Runs one chase in `mode`; returns the entry it reached.
  const auto chase_once = [&](const std::string& mode, uint64_t depth, uint64_t first) {
    const bool bitcode = mode == "ifunc-bitcode";
    const chase_request request{first, depth, 0, next_id++};
    uint64_t got = ~0ull;
    if (mode.rfind("ifunc", 0) == 0) {
      const uint64_t before = client.results.received;
      node.send(chase_owner_rank(&layout, first), bitcode ? chaser_bc : chaser_bin, request);
      node.run([&] { return client.results.received != before; });
      got = client.results.last.id == request.id ? client.results.last.index : ~0ull;
    } else if (mode == "am") {
      const uint64_t before = client.am_received;
      send_am(node.worker(), node.channel(chase_owner_rank(&layout, first)).endpoint().handle(),
              kAmChase, &request, sizeof(request));
      node.run([&] { return client.am_received != before; });
      got = client.am_last.id == request.id ? client.am_last.index : ~0ull;
    } else {
      uint64_t index = first;
      for (uint64_t d = 0; d < depth; ++d) {
        const int64_t owner = chase_owner_rank(&layout, index);
        const tc::RemoteBuffer& shard = *shards[owner];
        uint64_t value = 0;
        ucp_request_param_t params{};
        const uint64_t offset = (index - static_cast<uint64_t>(owner - 1) * per) * sizeof(uint64_t);
        tc::Request get(ucp_get_nbx(shard.endpoint().handle(), &value, sizeof(value),
                                    shard.address() + offset, shard.rkey(), &params),
                        "ucp_get_nbx");
        tc::check(get.wait(node.worker(), std::chrono::seconds(10)), "ucp_get_nbx");
        index = value;
      }
      got = index;
    }
    return got;
  };

  for (uint64_t depth = o.min_depth; depth <= o.max_depth; depth *= 2) {
    // Untimed chases before each mode's timed ones: the first carries the code
    // and pays the JIT; the rest bring the table back into the caches after
    // whatever ran before (another mode, a compile). Without them, the first
    // mode measured paid for cold caches and the bitcode chaser for its
    // compile's footprint: that was the 2-4x gap to the AM chase at 10 chases.
    const uint64_t warm_chases =
        std::clamp<uint64_t>(table.size() / std::max<uint64_t>(depth, 1), 2, 32);
    std::map<std::string, std::vector<double>> rounds;
    std::map<std::string, bool> correct;
    // Modes take turns, round after round, so drift on this shared machine
    // hits all of them alike; the median round is reported.
    for (unsigned round = 0; round < o.rounds; ++round) {
      for (const std::string& mode : o.modes) {
        const bool ifunc = mode.rfind("ifunc", 0) == 0;
        if (ifunc && round == 0) {
          // Hand every server the ReturnResult code (an empty payload does nothing).
          for (int64_t r = 1; r < ranks; ++r)
            node.send_bytes(r, mode == "ifunc-bitcode" ? result_bc : result_bin, {});
        }
        bool ok = correct.try_emplace(mode, true).first->second;
        const uint64_t warm = mode == "get" ? 1 : warm_chases;
        for (const Chase& c : plan(warm, depth))
          ok &= chase_once(mode, depth, c.first) == c.expected;
        const std::vector<Chase> timed = plan(o.chases, depth);
        std::vector<uint64_t> reached(timed.size());
        const auto start = Clock::now();
        for (std::size_t c = 0; c < timed.size(); ++c)
          reached[c] = chase_once(mode, depth, timed[c].first);
        rounds[mode].push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
            double(o.chases));
        for (std::size_t c = 0; c < timed.size(); ++c) ok &= reached[c] == timed[c].expected;
        correct[mode] = ok;
      }
    }
    for (const std::string& mode : o.modes) {
      std::vector<double>& us = rounds[mode];
      std::sort(us.begin(), us.end());
      out.push_back({transport_name, mode, servers, depth, us[us.size() / 2], correct[mode]});
    }
  }

  return out;
}

// Started by the site's launcher (mpirun, srun --mpi=pmix): rank, size and
// every rank's address come from it through the library (threechains::Launch,
// PMIx or MPI); rank 0 is the client, the others serve. UCX carries every chase.
int run_launched(const Options& o, tc::Launcher launcher) {
  int rc = 0;
  int64_t rank = -1;
  try {
    tc::Launch launch = tc::Launch::join(launcher);
    rank = launch.rank();
    const int64_t size = launch.ranks();
    if (size < 2) throw std::runtime_error("run at least 2 ranks (a client and a server)");
    const tc::Transport transport = tc::parse_transport(o.transports.front());
    const std::vector<uint64_t> table = make_table(o.log_entries, o.seed);
    const tc::Worker worker(tc::Context(chase_context(o, transport)));
    const MakeNode bootstrapped = [&](tc::NodeOptions options,
                                      const std::function<void(tc::Node&)>& prepare) {
      return tc::bootstrap(worker, launch, std::move(options), prepare);
    };
    std::unique_ptr<Client> client;
    std::unique_ptr<Server> server;
    tc::Node* node = nullptr;
    if (rank == 0) {
      client = std::make_unique<Client>(bootstrapped);
      node = &client->node;
    } else {
      server = std::make_unique<Server>(worker, rank, size, table, bootstrapped);
      node = &server->node;
    }
    if (rank == 0) {
      const std::vector<Measurement> ms =
          run_client(*node, client->state, o, table, o.transports.front());
      bool correct = true;
      for (const Measurement& m : ms) {
        fmt::print("  launched {:<14} {:>6} {:>12.1f} us  {}\n", m.mode, m.depth, m.us_per_chase,
                   m.correct ? "correct" : "WRONG");
        correct &= m.correct;
      }
      fmt::print("chase launched through {} ({} ranks): {}\n",
                 launch.launcher() == tc::Launcher::pmix ? "PMIx" : "MPI", size,
                 correct ? "every result correct" : "WRONG results");
      rc = correct ? 0 : 1;
      tc::barrier(launch, *node);  // the servers serve until the client is done
      node->close();
    } else {
      // The client enters the barrier when it is done; until then, serve.
      server->answer_shard_query();
      launch.barrier([](void* s) { static_cast<Server*>(s)->round(); }, server.get());
      node->close();
    }
    // Everyone serves until every rank has closed its channels.
    tc::barrier(launch, *node);
  } catch (const std::exception& e) {
    fmt::print(stderr, "threechains-chase (launched rank {}): {}\n", rank, e.what());
    rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Distributed pointer chase: ifunc (X-RDMA) vs Active Messages vs GET"};
  app.add_option("--transports", o.transports, "shm, tcp")->delimiter(',');
  app.add_option("--servers", o.servers, "server counts to run")->delimiter(',');
  app.add_option("--modes", o.modes, "ifunc-bitcode, ifunc-binary, am, get")->delimiter(',');
  app.add_option("--min-depth", o.min_depth);
  app.add_option("--max-depth", o.max_depth, "depths double from min to max");
  app.add_option("--log-entries", o.log_entries, "the table has 2^k entries")
      ->check(CLI::Range(4, 30));
  app.add_option("--chases", o.chases, "timed chases per mode and round (one at a time)")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "rounds of all modes taking turns; the median is reported")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed);
  app.add_option("--json", o.json, "append one JSON line per measurement");
  std::string launcher;
  app.add_option("--launched", launcher,
                 "started by mpirun or srun: rank, size and addresses from the launcher "
                 "(pmix, mpi, auto; first transport only)")
      ->check(CLI::IsMember({"pmix", "mpi", "auto"}));
  CLI11_PARSE(app, argc, argv);
  if (!launcher.empty()) {
    return run_launched(o, launcher == "pmix"  ? tc::Launcher::pmix
                           : launcher == "mpi" ? tc::Launcher::mpi
                                               : tc::Launcher::automatic);
  }

  try {
    std::FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "a");
    bool all_correct = true;
    for (const std::string& t : o.transports) {
      for (int64_t servers : o.servers) {
        const std::vector<Measurement> ms = run_mesh(o, t, servers);
        std::map<std::pair<std::string, uint64_t>, double> by;
        for (const Measurement& m : ms) by[{m.mode, m.depth}] = m.us_per_chase;
        // Said only where it is so: the servers and the client outnumber the cores.
        const unsigned cores = std::thread::hardware_concurrency();
        const bool oversubscribed = cores != 0 && static_cast<uint64_t>(servers) + 1 > cores;
        fmt::print("== {} servers over {}{} ==\n", servers, t,
                   oversubscribed ? fmt::format(" ({} processes on {} cores: oversubscribed, "
                                                "figures show scheduling as much as messaging)",
                                                servers + 1, cores)
                                  : std::string());
        fmt::print("  {:<14} {:>6} {:>12} {:>12} {:>10} {:>10}  {}\n", "mode", "depth", "us/chase",
                   "chases/s", "vs get", "vs am", "result");
        for (const Measurement& m : ms) {
          const auto ratio = [&](const char* base) {
            const auto it = by.find({base, m.depth});
            return it == by.end() || m.mode == base
                       ? std::string()
                       : fmt::format("{:.2f}x", it->second / m.us_per_chase);
          };
          fmt::print("  {:<14} {:>6} {:>12.1f} {:>12.0f} {:>10} {:>10}  {}\n", m.mode, m.depth,
                     m.us_per_chase, 1e6 / m.us_per_chase, ratio("get"), ratio("am"),
                     m.correct ? "correct" : "WRONG");
          all_correct &= m.correct;
          if (json != nullptr) {
            fmt::print(json,
                       "{{\"transport\":\"{}\",\"servers\":{},\"mode\":\"{}\",\"depth\":{},\"us_"
                       "per_chase\":{:.3f},"
                       "\"chases_per_s\":{:.1f},\"correct\":{}}}\n",
                       m.transport, m.servers, m.mode, m.depth, m.us_per_chase,
                       1e6 / m.us_per_chase, m.correct ? "true" : "false");
          }
        }
        std::fflush(stdout);
      }
    }
    if (json != nullptr) std::fclose(json);
    fmt::print("{}\n", all_correct ? "chase: every result correct" : "chase: WRONG results");
    return all_correct ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "threechains-chase: {}\n", e.what());
    return 1;
  }
}
