// attacker.cpp: a hostile UCX peer, for the ThreeChains attack tests only.
//
// It speaks raw UCX (no ThreeChains code) to a Receiver that a test started
// itself, and tries what a malicious or broken peer could: remote memory
// access with a forged rkey, malformed handshakes, connection churn, half-open
// handshakes and floods of Active Messages. The test then checks that the
// target survived. Never point it at anybody else's machine: it accepts only a
// host in 127.0.0.0/8.
//
//   attacker MODE --port P [--host 127.x.y.z] [--transport tcp|shm] [--timeout S] ...
//
// One line per observation goes to stdout. Exit status: 0 the attack ran
// (whatever the target did), 1 it could not run (no connection at all, UCX
// failed locally), 2 bad arguments. Every wait is bounded (--timeout, 60 s by
// default, caps them all), and a watchdog ends the process if UCX itself hangs.
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <setjmp.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

static_assert(std::endian::native == std::endian::little, "headers are sent as little-endian structs");

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

Clock::time_point g_deadline;  // the overall limit: no wait goes past it

Clock::time_point within(Ms budget) { return std::min(Clock::now() + budget, g_deadline); }
bool expired() { return Clock::now() >= g_deadline; }
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
const char* str(ucs_status_t status) { return ucs_status_string(status); }

// The wire protocol the target speaks (src/engine/protocol.hpp), copied by hand.
constexpr unsigned kAmHello = 0x7C01, kAmCode = 0x7C02, kAmFrame = 0x7C04, kAmProof = 0x7C05;
constexpr unsigned kAmWelcome = 0x7C11, kAmChallenge = 0x7C14;
constexpr unsigned kFirstReply = 0x7C11, kLastReply = 0x7C15;

struct Hello {
  uint32_t version;
  uint32_t slots;
  uint64_t slot_size;
  uint64_t credit_address;
  int64_t rank;
  uint8_t nonce[32];
  uint8_t key[32];
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(Hello) == 104, "no padding: the fields sum to 104 bytes");

struct Welcome {
  uint32_t version;
  int32_t status;
  uint32_t slots;
  uint32_t flags;
  uint64_t slot_size;
  uint64_t ring_address;  // the ring's packed rkey follows as AM data
};
static_assert(sizeof(Welcome) == 32);
constexpr uint64_t kCreditLineSize = 64;

// ---------------------------------------------------------------- options

struct Options {
  std::string mode;
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string transport = "tcp";
  double timeout = 60;
  uint64_t address = 0;
  std::string variant = "all";
  std::optional<std::array<uint8_t, 32>> key;
  uint32_t version = 4;  // kProtocolVersion in src/engine/protocol.hpp: else refused before anything
  unsigned threads = 16;
  uint64_t cycles = 10000;
  unsigned count = 64;
  double hold = 3;
  bool silent = false;
  uint64_t bytes = 512ull << 20;
  uint64_t size = 1ull << 20;
  unsigned connections = 4;
  std::optional<int64_t> credit_shift;  // granted: ask credits by put, at our word + this
};

void usage() {
  std::fputs(
      "usage: attacker MODE --port P [--host 127.0.0.1] [--transport tcp|shm] [--timeout S]\n"
      "  rma       --address 0xA\n"
      "  granted   --address 0xA [--credit-shift N]   (to a Trust::anyone() target: a ring's own\n"
      "            rkey aimed elsewhere; or ask credits by put into a word N bytes off our segment's)\n"
      "  hello     [--variant empty|garbage|huge|zeros|valid-looking|all] [--key HEX64] [--version N]\n"
      "  churn     [--threads T] [--cycles N]   (T churners, each a process of its own)\n"
      "  half-open [--count C] [--hold S] [--key HEX64] [--silent]\n"
      "  junk-am   [--bytes B] [--size Z] [--connections K]   (sizes take K/M/G)\n"
      "The host must be in 127.0.0.0/8: this program attacks only what a test started.\n",
      stderr);
}

std::optional<uint64_t> parse_uint(const std::string& text, int base = 10) {
  if (text.empty() || text[0] == '-') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, base);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return value;
}

std::optional<uint64_t> parse_size(std::string text) {
  uint64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': scale = 1ull << 10; break;
      case 'M': case 'm': scale = 1ull << 20; break;
      case 'G': case 'g': scale = 1ull << 30; break;
      default: break;
    }
    if (scale != 1) text.pop_back();
  }
  const auto value = parse_uint(text);
  if (!value || *value > UINT64_MAX / scale) return std::nullopt;
  return *value * scale;
}

std::optional<double> parse_seconds(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(value >= 0) || value > 3600) return std::nullopt;
  return value;
}

std::optional<std::array<uint8_t, 32>> parse_key(const std::string& text) {
  if (text.size() != 64) return std::nullopt;
  std::array<uint8_t, 32> key{};
  for (std::size_t i = 0; i < key.size(); ++i) {
    const auto hex = [&](std::size_t at) { return std::isxdigit(static_cast<unsigned char>(text[at])) != 0; };
    if (!hex(2 * i) || !hex(2 * i + 1)) return std::nullopt;
    const auto byte = parse_uint(text.substr(2 * i, 2), 16);
    if (!byte) return std::nullopt;
    key[i] = static_cast<uint8_t>(*byte);
  }
  return key;
}

bool loopback_host(const std::string& host) {
  in_addr address{};
  return inet_pton(AF_INET, host.c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

// Fills `out` from `--key value` pairs; false (with a message) on anything wrong.
bool parse(int argc, char** argv, Options& out) {
  if (argc < 2) return false;
  out.mode = argv[1];
  if (out.mode != "rma" && out.mode != "hello" && out.mode != "churn" && out.mode != "half-open" &&
      out.mode != "junk-am" && out.mode != "granted") {
    std::fprintf(stderr, "unknown mode '%s'\n", argv[1]);
    return false;
  }
  bool have_port = false, have_address = false;
  for (int i = 2; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--silent") { out.silent = true; continue; }
    if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", key.c_str()); return false; }
    const std::string value = argv[++i];
    bool ok = true;
    const auto number = [&](auto& field, uint64_t low, uint64_t high) {
      const auto v = parse_uint(value);
      ok = v && *v >= low && *v <= high;
      if (ok) field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
    };
    const auto size = [&](uint64_t& field) {
      const auto v = parse_size(value);
      ok = v && *v > 0;
      if (ok) field = *v;
    };
    const auto secs = [&](double& field) {
      const auto v = parse_seconds(value);
      ok = v.has_value();
      if (ok) field = *v;
    };
    if (key == "--port") { number(out.port, 1, 65535); have_port = ok; }
    else if (key == "--host") { out.host = value; ok = loopback_host(value); }
    else if (key == "--transport") { out.transport = value; ok = value == "tcp" || value == "shm"; }
    else if (key == "--timeout") secs(out.timeout);
    else if (key == "--hold") secs(out.hold);
    else if (key == "--address") {
      const auto v = value.rfind("0x", 0) == 0 ? parse_uint(value.substr(2), 16) : std::nullopt;
      ok = v.has_value();
      if (ok) out.address = *v;
      have_address = ok;
    }
    else if (key == "--variant") {
      out.variant = value;
      ok = value == "empty" || value == "garbage" || value == "huge" || value == "zeros" ||
           value == "valid-looking" || value == "all";
    }
    else if (key == "--key") { out.key = parse_key(value); ok = out.key.has_value(); }
    else if (key == "--version") number(out.version, 0, UINT32_MAX);
    else if (key == "--threads") number(out.threads, 1, 256);
    else if (key == "--cycles") number(out.cycles, 1, 100000000);
    else if (key == "--count") number(out.count, 1, 100000);
    else if (key == "--connections") number(out.connections, 1, 1024);
    else if (key == "--credit-shift") {
      const auto v = value.rfind("0x", 0) == 0 ? parse_uint(value.substr(2), 16) : parse_uint(value);
      ok = v.has_value();
      if (ok) out.credit_shift = static_cast<int64_t>(*v);
    }
    else if (key == "--bytes") size(out.bytes);
    else if (key == "--size") size(out.size);
    else { std::fprintf(stderr, "unknown option %s\n", key.c_str()); return false; }
    if (!ok) { std::fprintf(stderr, "bad value for %s: '%s'\n", key.c_str(), value.c_str()); return false; }
  }
  if (!have_port) { std::fputs("--port is required\n", stderr); return false; }
  if ((out.mode == "rma" || out.mode == "granted") && !have_address) {
    std::fputs("rma and granted need --address 0x...\n", stderr);
    return false;
  }
  return true;
}

template <class T>
void fill_random(T* data, std::size_t count) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  auto* bytes = reinterpret_cast<uint8_t*>(data);
  for (std::size_t i = 0; i < count * sizeof(T); ++i) bytes[i] = static_cast<uint8_t>(rng());
}

// ---------------------------------------------------------------- UCX, wrapped

struct Fatal : std::runtime_error {
  Fatal(const std::string& what, ucs_status_t status) : std::runtime_error(what + ": " + str(status)) {}
};

struct ContextFree { void operator()(ucp_context_h c) const { ucp_cleanup(c); } };
struct WorkerFree { void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); } };
struct RkeyFree { void operator()(ucp_rkey_h k) const { ucp_rkey_destroy(k); } };
using Context = std::unique_ptr<ucp_context, ContextFree>;
using Worker = std::unique_ptr<ucp_worker, WorkerFree>;
using Rkey = std::unique_ptr<ucp_rkey, RkeyFree>;

struct Session {  // one context, one worker; the worker goes first
  Context context;
  Worker worker;
  ucp_worker_h get() const { return worker.get(); }
};

Session open_session(const Options& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) throw Fatal("ucp_config_read", status);
  const bool shm = options.transport == "shm";
  status = ucp_config_modify(config, "TLS", shm ? "posix,sysv,self,tcp" : "tcp,self");
  if (status == UCS_OK && shm) status = ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_AMO64;
  ucp_context_h context = nullptr;
  if (status == UCS_OK) status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) throw Fatal("ucp_init", status);
  Session session{Context{context}, nullptr};
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  status = ucp_worker_create(context, &worker_params, &worker);
  if (status != UCS_OK) throw Fatal("ucp_worker_create", status);
  session.worker.reset(worker);
  return session;
}

// Progresses `worker` until `request` completes or `deadline`; frees it either way.
ucs_status_t wait(ucp_worker_h worker, ucs_status_ptr_t request, Clock::time_point deadline) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status = ucp_request_check_status(request);
  while (status == UCS_INPROGRESS && Clock::now() < deadline) {
    ucp_worker_progress(worker);
    status = ucp_request_check_status(request);
  }
  ucp_request_free(request);  // an unfinished one is released when it completes
  return status == UCS_INPROGRESS ? UCS_ERR_TIMED_OUT : status;
}

void progress_for(ucp_worker_h worker, Ms duration) {
  const auto until = within(duration);
  while (Clock::now() < until) ucp_worker_progress(worker);
}

// Prints "NAME: status=..." for an operation; `immediate` when it failed at once.
ucs_status_t report(const char* name, ucp_worker_h worker, ucs_status_ptr_t request, Ms budget = Ms{5000}) {
  const bool immediate = UCS_PTR_IS_ERR(request);
  const ucs_status_t status = wait(worker, request, within(budget));
  std::printf("%s: status=%s%s\n", name, str(status), immediate ? " (immediate)" : "");
  return status;
}

class Memory {  // a region of our own, mapped by UCX, and its packed rkey
 public:
  Memory(ucp_context_h context, std::size_t length) : context_(context) {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.address = nullptr;
    params.length = length;
    params.flags = UCP_MEM_MAP_ALLOCATE;
    const ucs_status_t status = ucp_mem_map(context, &params, &memh_);
    if (status != UCS_OK) throw Fatal("ucp_mem_map", status);
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    if (ucp_mem_query(memh_, &attr) == UCS_OK) address_ = reinterpret_cast<uint64_t>(attr.address);
    void* packed = nullptr;
    std::size_t size = 0;
    const ucs_status_t pack = ucp_rkey_pack(context, memh_, &packed, &size);
    if (pack != UCS_OK) {
      ucp_mem_unmap(context_, memh_);
      throw Fatal("ucp_rkey_pack", pack);
    }
    rkey_.assign(static_cast<uint8_t*>(packed), static_cast<uint8_t*>(packed) + size);
    ucp_rkey_buffer_release(packed);
  }
  ~Memory() { ucp_mem_unmap(context_, memh_); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  const std::vector<uint8_t>& packed_rkey() const { return rkey_; }
  uint64_t address() const { return address_; }

 private:
  ucp_context_h context_;
  ucp_mem_h memh_ = nullptr;
  uint64_t address_ = 0;
  std::vector<uint8_t> rkey_;
};

struct EpState {  // what the error handler saw
  bool failed = false;
  ucs_status_t status = UCS_OK;
};

void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* state = static_cast<EpState*>(arg);
  state->failed = true;
  state->status = status;
}

class Endpoint {  // a client endpoint, force-closed (bounded) when it goes
 public:
  static std::unique_ptr<Endpoint> create(ucp_worker_h worker, const sockaddr_in& address, ucs_status_t& status) {
    auto state = std::make_unique<EpState>();
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
    params.sockaddr.addrlen = sizeof(address);
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = on_ep_error;
    params.err_handler.arg = state.get();
    ucp_ep_h ep = nullptr;
    status = ucp_ep_create(worker, &params, &ep);
    if (status != UCS_OK) return nullptr;
    return std::unique_ptr<Endpoint>(new Endpoint(worker, ep, std::move(state)));
  }
  ~Endpoint() { close(); }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  ucp_ep_h get() const { return ep_; }
  bool failed() const { return state_->failed; }
  ucs_status_t error() const { return state_->status; }

  ucs_status_t close(Ms budget = Ms{1000}) {
    if (ep_ == nullptr) return UCS_OK;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    const ucs_status_t status = wait(worker_, ucp_ep_close_nbx(ep_, &param), Clock::now() + budget);
    ep_ = nullptr;
    // Not closed in time: UCX may still call the error handler; keep its state.
    if (status == UCS_ERR_TIMED_OUT) static_cast<void>(state_.release());
    return status;
  }

 private:
  Endpoint(ucp_worker_h worker, ucp_ep_h ep, std::unique_ptr<EpState> state)
      : worker_(worker), ep_(ep), state_(std::move(state)) {}
  ucp_worker_h worker_;
  ucp_ep_h ep_;
  std::unique_ptr<EpState> state_;
};

sockaddr_in target_address(const Options& options) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(options.port);
  inet_pton(AF_INET, options.host.c_str(), &address.sin_addr);
  return address;
}

// Opens `count` endpoints and flushes them all together; failures are printed
// and left out.
std::vector<std::unique_ptr<Endpoint>> connect_all(ucp_worker_h worker, const Options& options,
                                                   unsigned count, Ms budget = Ms{5000}) {
  const sockaddr_in address = target_address(options);
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  std::vector<ucs_status_ptr_t> flushes;
  for (unsigned i = 0; i < count && !expired(); ++i) {
    ucs_status_t status = UCS_OK;
    auto ep = Endpoint::create(worker, address, status);
    if (!ep) { std::printf("connect: ep_create status=%s\n", str(status)); continue; }
    ucp_request_param_t param{};
    flushes.push_back(ucp_ep_flush_nbx(ep->get(), &param));
    endpoints.push_back(std::move(ep));
  }
  const auto deadline = within(budget);
  std::vector<std::unique_ptr<Endpoint>> connected;
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    const ucs_status_t status = wait(worker, flushes[i], deadline);
    if (status == UCS_OK && !endpoints[i]->failed()) connected.push_back(std::move(endpoints[i]));
    else std::printf("connect: status=%s\n", str(status == UCS_OK ? endpoints[i]->error() : status));
  }
  return connected;
}

// Counts (and, unless quiet, prints) what the target sends back.
struct Replies {
  struct Slot { unsigned id; Replies* replies; };
  bool quiet = false;
  int welcomes = 0, challenges = 0, others = 0;
  std::array<Slot, kLastReply - kFirstReply + 1> slots{};
  // The first WELCOME that granted a ring, and its rkey (granted mode).
  std::optional<Welcome> granted;
  std::vector<uint8_t> granted_rkey;
};

ucs_status_t on_reply(void* arg, const void* header, size_t header_length, void* data, size_t length,
                      const ucp_am_recv_param_t* param) {
  const auto& slot = *static_cast<Replies::Slot*>(arg);
  Replies& replies = *slot.replies;
  if (slot.id == kAmWelcome) {
    ++replies.welcomes;
    int32_t status = 0;
    if (header_length >= 8) std::memcpy(&status, static_cast<const uint8_t*>(header) + 4, sizeof(status));
    if (!replies.quiet) std::printf("welcome status=%d\n", status);
    if (status == 0 && header_length == sizeof(Welcome) && !replies.granted &&
        (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
      replies.granted.emplace();
      std::memcpy(&*replies.granted, header, sizeof(Welcome));
      const auto* bytes = static_cast<const uint8_t*>(data);
      replies.granted_rkey.assign(bytes, bytes + length);
    }
  } else if (slot.id == kAmChallenge) {
    ++replies.challenges;
    if (!replies.quiet) std::printf("challenge\n");
  } else {
    ++replies.others;
    if (!replies.quiet)
      std::printf("reply id=0x%X header=%zu data=%zu\n", slot.id, header_length, length);
  }
  return UCS_OK;  // a rendezvous message is dropped
}

void listen_for_replies(ucp_worker_h worker, Replies& replies) {
  for (unsigned id = kFirstReply; id <= kLastReply; ++id) {
    auto& slot = replies.slots[id - kFirstReply];
    slot = {id, &replies};
    ucp_am_handler_param_t param{};
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG;
    param.id = id;
    param.cb = on_reply;
    param.arg = &slot;
    const ucs_status_t status = ucp_worker_set_am_recv_handler(worker, &param);
    if (status != UCS_OK) throw Fatal("ucp_worker_set_am_recv_handler", status);
  }
}

ucs_status_ptr_t send_am(ucp_ep_h ep, unsigned id, const void* header, std::size_t header_length,
                         const void* data, std::size_t length, uint32_t flags) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flags;
  return ucp_am_send_nbx(ep, id, header, header_length, length ? data : nullptr, length, &param);
}

// ---------------------------------------------------------------- modes

int run_rma(const Options& options) {
  Replies replies;  // outlives the worker that calls into it
  Session session = open_session(options);
  ucp_worker_h worker = session.get();
  // The target's refusal (a WELCOME, once its handshake deadline passed)
  // arrives while we wait for the get: UCX 1.13 crashes the receiver of a
  // reply-flagged AM that has no handler, so take it.
  listen_for_replies(worker, replies);
  Memory memory(session.context.get(), 64);
  uint64_t put_value = 0x4141414141414141ull, got = 0, one = 1;  // outlive the endpoint
  auto endpoints = connect_all(worker, options, 1);
  if (endpoints.empty()) return 1;
  Endpoint& ep = *endpoints.front();
  ucp_rkey_h raw = nullptr;
  const ucs_status_t unpacked = ucp_ep_rkey_unpack(ep.get(), memory.packed_rkey().data(), &raw);
  std::printf("rkey_unpack: status=%s size=%zu\n", str(unpacked), memory.packed_rkey().size());
  const Rkey rkey{unpacked == UCS_OK ? raw : nullptr};
  if (rkey) {
    ucp_request_param_t param{};
    report("put", worker, ucp_put_nbx(ep.get(), &put_value, sizeof(put_value), options.address, rkey.get(), &param));
    const ucs_status_t status = report(
        "get", worker, ucp_get_nbx(ep.get(), &got, sizeof(got), options.address + 8, rkey.get(), &param));
    if (status == UCS_OK) std::printf("get: value=0x%016llx\n", static_cast<unsigned long long>(got));
    ucp_request_param_t atomic{};
    atomic.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    atomic.datatype = ucp_dt_make_contig(sizeof(uint64_t));
    // UCX 1.22 spins for ever inside ucp_atomic_op_nbx on an endpoint that
    // failed (ucp_proto_reconfig_progress); 1.13 returned at once. Nothing
    // reaches the target over a failed endpoint either way.
    if (ep.failed()) {
      std::printf("atomic: skipped (endpoint failed: %s)\n", str(ep.error()));
    } else {
      report("atomic", worker,
             ucp_atomic_op_nbx(ep.get(), UCP_ATOMIC_OP_ADD, &one, 1, options.address + 16,
                               rkey.get(), &atomic));
    }
  } else {
    std::printf("put: skipped (no rkey)\nget: skipped (no rkey)\natomic: skipped (no rkey)\n");
  }
  ucp_request_param_t flush{};
  report("flush", worker, ucp_ep_flush_nbx(ep.get(), &flush));
  if (ep.failed()) std::printf("endpoint: failed status=%s\n", str(ep.error()));
  std::printf("rma: done\n");
  return 0;
}

// A peer the target granted a ring (a Receiver with Trust::anyone() grants
// one to whoever says HELLO) aims with that ring's own rkey at what is not
// its ring: the canaries (--address), the bytes just past its ring and
// credit line (where the next peer's ring may be), and, over shared memory,
// the canaries mapped through ucp_rkey_ptr. The target must lose nothing.
// Over shared memory UCX carries a put or get to a mapped segment itself, in
// this process: aimed outside the segment, the copy faults here, in the
// attacker. Each such operation runs under this guard, which reports the
// fault and goes on with the next one.
sigjmp_buf g_fault_jump;
void on_fault(int) { siglongjmp(g_fault_jump, 1); }

// True if the operation faulted.
template <class Operation>
bool guarded(const char* name, Operation&& operation) {
  struct sigaction action{}, old_segv{}, old_bus{};
  action.sa_handler = on_fault;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_NODEFER;
  sigaction(SIGSEGV, &action, &old_segv);
  sigaction(SIGBUS, &action, &old_bus);
  bool faulted = false;
  if (sigsetjmp(g_fault_jump, 1) == 0) {
    (void)operation();
  } else {
    faulted = true;
    std::printf("%s: faulted in the attacker's own address space (the segment maps only the ring)\n",
                name);
  }
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  return faulted;
}

Hello make_hello(const Options& options);
int run_granted(const Options& options) {
  Replies replies;  // outlives the worker that calls into it
  Session session = open_session(options);
  ucp_worker_h worker = session.get();
  listen_for_replies(worker, replies);
  uint64_t put_value = 0x4242424242424242ull, got = 0, one = 1;  // outlive the endpoint
  // A well-formed HELLO with a credit word of our own, as an honest source's
  // (an older target unpacked its rkey at once, and died on an empty one).
  Memory credit_word(session.context.get(), 64);
  Hello hello = make_hello(options);
  if (options.credit_shift) {
    // Credits by put (a target whose context does RMA puts them), into a
    // word that is not where our rkey's segment is: the target must refuse.
    hello.flags |= 2;  // kHelloCreditByPut
    hello.credit_address = credit_word.address() + static_cast<uint64_t>(*options.credit_shift);
  }
  auto endpoints = connect_all(worker, options, 1);
  if (endpoints.empty()) return 1;
  Endpoint& ep = *endpoints.front();
  report("hello", worker,
         send_am(ep.get(), kAmHello, &hello, sizeof(hello), credit_word.packed_rkey().data(),
                 credit_word.packed_rkey().size(), UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER));
  const auto deadline = within(Ms{5000});
  while (!replies.granted && Clock::now() < deadline && !ep.failed()) ucp_worker_progress(worker);
  if (!replies.granted) {
    std::printf("granted: no ring\n");
    // Refused (its WELCOME said why), as a misplaced credit word must be.
    return options.credit_shift && replies.welcomes > 0 ? 0 : 1;
  }
  const Welcome& welcome = *replies.granted;
  const uint64_t ring_end = welcome.ring_address + welcome.slots * welcome.slot_size + kCreditLineSize;
  std::printf("granted: ring=0x%llx slots=%u slot_size=%llu rkey=%zu bytes\n",
              static_cast<unsigned long long>(welcome.ring_address), welcome.slots,
              static_cast<unsigned long long>(welcome.slot_size), replies.granted_rkey.size());
  ucp_rkey_h raw = nullptr;
  const ucs_status_t unpacked = ucp_ep_rkey_unpack(ep.get(), replies.granted_rkey.data(), &raw);
  std::printf("rkey_unpack: status=%s\n", str(unpacked));
  const Rkey rkey{unpacked == UCS_OK ? raw : nullptr};
  if (rkey) {
    void* mapped = nullptr;
    std::printf("rkey_ptr canary: status=%s\n",
                str(ucp_rkey_ptr(rkey.get(), options.address, &mapped)));
    ucp_request_param_t param{};
    // Past the ring first, the canaries last: over shared memory an aim
    // outside the segment faults in this process, and after a fault UCX's
    // state here is not to be trusted: the attacker stops there.
    bool faulted = false;
    for (const uint64_t where : {ring_end, ring_end + 4096, options.address}) {
      if (faulted) break;
      std::printf("aim: 0x%llx\n", static_cast<unsigned long long>(where));
      faulted |= guarded("put", [&] {
        return report("put", worker,
                      ucp_put_nbx(ep.get(), &put_value, sizeof(put_value), where, rkey.get(), &param));
      });
      if (faulted) break;
      got = 0;
      ucs_status_t status = UCS_ERR_IO_ERROR;
      faulted |= guarded("get", [&] {
        status = report("get", worker,
                        ucp_get_nbx(ep.get(), &got, sizeof(got), where + 8, rkey.get(), &param));
        return status;
      });
      if (!faulted && status == UCS_OK)
        std::printf("get: value=0x%016llx\n", static_cast<unsigned long long>(got));
    }
    if (faulted) {
      std::printf("granted: stopped after a fault in this process\ngranted: done\n");
      std::fflush(stdout);
      _exit(0);
    }
    ucp_request_param_t atomic{};
    atomic.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    atomic.datatype = ucp_dt_make_contig(sizeof(uint64_t));
    if (ep.failed()) {  // as in run_rma: UCX 1.22 would spin for ever
      std::printf("atomic: skipped (endpoint failed: %s)\n", str(ep.error()));
    } else {
      report("atomic", worker,
             ucp_atomic_op_nbx(ep.get(), UCP_ATOMIC_OP_ADD, &one, 1, options.address + 16,
                               rkey.get(), &atomic));
    }
  }
  ucp_request_param_t flush{};
  report("flush", worker, ucp_ep_flush_nbx(ep.get(), &flush));
  if (ep.failed()) std::printf("endpoint: failed status=%s\n", str(ep.error()));
  std::printf("granted: done\n");
  return 0;
}

Hello make_hello(const Options& options) {
  Hello hello{};
  hello.version = options.version;
  hello.slots = 4;
  hello.slot_size = 4096;
  hello.credit_address = 0x1000;
  hello.rank = -1;
  fill_random(hello.nonce, sizeof(hello.nonce));
  if (options.key) std::memcpy(hello.key, options.key->data(), sizeof(hello.key));
  else fill_random(hello.key, sizeof(hello.key));
  hello.flags = 1;
  return hello;
}

std::vector<uint8_t> hello_data(const std::string& variant, const std::vector<uint8_t>& own_rkey) {
  std::vector<uint8_t> data;
  if (variant == "garbage") { data.resize(300); fill_random(data.data(), data.size()); }
  else if (variant == "huge") data.assign(8192, 0xff);
  else if (variant == "zeros") data.assign(64, 0);
  else if (variant == "valid-looking") {
    data.resize(std::max<std::size_t>(own_rkey.size(), 64));
    fill_random(data.data(), data.size());
    std::memcpy(data.data(), own_rkey.data(), std::min<std::size_t>(16, own_rkey.size()));
  }
  return data;
}

constexpr uint32_t kHelloFlags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;

// One HELLO (of `variant`) and a premature PROOF on a fresh endpoint; false if
// it could not connect.
bool hello_once(Session& session, const Options& options, const std::string& variant,
                const std::vector<uint8_t>& own_rkey) {
  ucp_worker_h worker = session.get();
  const Hello hello = make_hello(options);  // these outlive the endpoint
  const std::vector<uint8_t> data = hello_data(variant, own_rkey);
  std::array<uint8_t, 64> proof{};
  fill_random(proof.data(), proof.size());
  std::printf("hello[%s]: start\n", variant.c_str());
  auto endpoints = connect_all(worker, options, 1);
  if (endpoints.empty()) return false;
  Endpoint& ep = *endpoints.front();
  report("hello", worker, send_am(ep.get(), kAmHello, &hello, sizeof(hello), data.data(), data.size(), kHelloFlags));
  report("proof", worker, send_am(ep.get(), kAmProof, proof.data(), proof.size(), nullptr, 0, kHelloFlags));
  progress_for(worker, Ms{500});
  if (ep.failed()) std::printf("hello[%s]: endpoint failed status=%s\n", variant.c_str(), str(ep.error()));
  std::printf("hello[%s]: done\n", variant.c_str());
  return true;
}

int run_hello(const Options& options) {
  Replies replies;  // outlives the worker that calls into it
  Session session = open_session(options);
  listen_for_replies(session.get(), replies);
  Memory memory(session.context.get(), 64);
  const std::vector<std::string> variants =
      options.variant == "all"
          ? std::vector<std::string>{"empty", "garbage", "huge", "zeros", "valid-looking"}
          : std::vector<std::string>{options.variant};
  int connected = 0;
  for (const auto& variant : variants)
    if (!expired() && hello_once(session, options, variant, memory.packed_rkey())) ++connected;
  std::printf("hello: variants=%zu connected=%d welcomes=%d challenges=%d\n", variants.size(), connected,
              replies.welcomes, replies.challenges);
  return connected > 0 ? 0 : 1;
}

int run_half_open(const Options& options) {
  Replies replies;
  replies.quiet = true;
  Session session = open_session(options);
  ucp_worker_h worker = session.get();
  listen_for_replies(worker, replies);
  const Hello hello = make_hello(options);
  const std::vector<uint8_t> zeros(64, 0);
  auto endpoints = connect_all(worker, options, options.count, Ms{10000});
  std::printf("half-open: endpoints=%u connected=%zu\n", options.count, endpoints.size());
  if (endpoints.empty()) return 1;
  int sent = 0;
  if (!options.silent) {
    std::vector<ucs_status_ptr_t> sends;
    for (auto& ep : endpoints)
      sends.push_back(send_am(ep->get(), kAmHello, &hello, sizeof(hello), zeros.data(), zeros.size(), kHelloFlags));
    const auto deadline = within(Ms{5000});
    for (auto* request : sends) sent += wait(worker, request, deadline) == UCS_OK;
  }
  std::printf("half-open: holding connected=%zu hellos=%d seconds=%.1f\n", endpoints.size(), sent, options.hold);
  const auto held = Clock::now();
  progress_for(worker, std::chrono::duration_cast<Ms>(std::chrono::duration<double>(options.hold)));
  int failed = 0;
  for (auto& ep : endpoints) failed += ep->failed();
  std::printf("half-open: hellos=%d challenges=%d welcomes=%d others=%d failed=%d held=%.2f\n", sent,
              replies.challenges, replies.welcomes, replies.others, failed, seconds_since(held));
  return 0;
}

struct JunkConnection {
  struct Slot { ucs_status_ptr_t request = nullptr; uint64_t header = 0; uint64_t bytes = 0; };
  std::unique_ptr<Endpoint> ep;
  std::array<Slot, 16> slots{};  // at most 16 sends outstanding
  bool dead = false;
};

int run_junk_am(const Options& options) {
  // kAmDoorbell (0x7C06): its handler is reachable before a key, like every id.
  static constexpr std::array<unsigned, 6> kIds{kAmFrame, kAmCode,  kAmHello,
                                                kAmProof, 0x7C06, 0x1234};
  static constexpr std::array<uint32_t, 3> kFlags{UCP_AM_SEND_FLAG_EAGER, UCP_AM_SEND_FLAG_RNDV, 0};
  Replies replies;
  replies.quiet = true;
  const std::vector<uint8_t> data(options.size, 0xa5);  // outlives every send
  Session session = open_session(options);
  ucp_worker_h worker = session.get();
  listen_for_replies(worker, replies);
  std::vector<JunkConnection> connections;
  for (auto& ep : connect_all(worker, options, options.connections)) connections.push_back({std::move(ep)});
  if (connections.empty()) return 1;
  const auto start = Clock::now();
  auto last_completion = start;
  uint64_t posted = 0, sent = 0, errors = 0, n = 0;
  std::map<std::string, uint64_t> failures;  // "status id flags" -> count
  const auto settle = [&](JunkConnection::Slot& slot, ucs_status_t status) {
    if (status == UCS_OK) { sent += slot.bytes; last_completion = Clock::now(); }
    else {
      ++errors;
      char what[96];
      std::snprintf(what, sizeof(what), "status=%s id=0x%X flags=%u", str(status),
                    kIds[slot.header % kIds.size()], kFlags[slot.header % kFlags.size()]);
      ++failures[what];
    }
    slot.request = nullptr;
  };
  const auto alive = [&] {
    return std::any_of(connections.begin(), connections.end(), [](auto& c) { return !c.dead; });
  };
  while (posted < options.bytes && alive() && !expired()) {
    if (Clock::now() - last_completion > std::chrono::seconds(10)) {
      std::printf("junk-am: stalled (nothing completed for 10 s)\n");
      break;
    }
    for (std::size_t c = 0; c < connections.size(); ++c) {
      JunkConnection& conn = connections[c];
      if (conn.dead) continue;
      for (auto& slot : conn.slots)
        if (slot.request != nullptr && ucp_request_check_status(slot.request) != UCS_INPROGRESS) {
          const ucs_status_t status = ucp_request_check_status(slot.request);
          ucp_request_free(slot.request);
          settle(slot, status);
        }
      if (conn.ep->failed()) {
        std::printf("junk-am: endpoint %zu failed status=%s\n", c, str(conn.ep->error()));
        conn.dead = true;
        continue;
      }
      for (auto& slot : conn.slots) {
        if (slot.request != nullptr || posted >= options.bytes) continue;
        slot.bytes = std::min(options.size, options.bytes - posted);
        slot.header = n;
        const uint32_t flags = kFlags[n % kFlags.size()] | UCP_AM_SEND_FLAG_REPLY;
        const ucs_status_ptr_t request =
            send_am(conn.ep->get(), kIds[n % kIds.size()], &slot.header, sizeof(slot.header), data.data(),
                    slot.bytes, flags);
        ++n;
        posted += slot.bytes;
        if (UCS_PTR_IS_PTR(request)) slot.request = request;
        else settle(slot, UCS_PTR_STATUS(request));
      }
    }
    ucp_worker_progress(worker);
  }
  const auto drain = within(Ms{5000});  // what is still in flight: finish it, or give up on it
  for (auto& conn : connections)
    for (auto& slot : conn.slots)
      if (slot.request != nullptr) settle(slot, wait(worker, slot.request, drain));
  std::printf("junk-am: sent=%llu seconds=%.2f errors=%llu\n", static_cast<unsigned long long>(sent),
              seconds_since(start), static_cast<unsigned long long>(errors));
  for (const auto& [what, count] : failures)
    std::printf("junk-am: error %s count=%llu\n", what.c_str(), static_cast<unsigned long long>(count));
  std::printf("junk-am: posted=%llu messages=%llu failed_endpoints=%zu replies=%d\n",
              static_cast<unsigned long long>(posted), static_cast<unsigned long long>(n),
              static_cast<std::size_t>(std::count_if(connections.begin(), connections.end(),
                                                     [](auto& c) { return c.dead; })),
              replies.welcomes + replies.challenges + replies.others);
  return 0;
}

struct ChurnCount {
  uint64_t cycles = 0, create_failures = 0, close_timeouts = 0, close_errors = 0;
};

// `cycles` connect/close cycles on a context and worker of this process's own.
ChurnCount churn_worker(const Options& options, uint64_t first, uint64_t cycles) {
  ChurnCount count;
  Session session = open_session(options);
  ucp_worker_h worker = session.get();
  const sockaddr_in address = target_address(options);
  for (uint64_t cycle = first; cycle < first + cycles && !expired(); ++cycle) {
    ++count.cycles;
    ucs_status_t status = UCS_OK;
    auto ep = Endpoint::create(worker, address, status);
    if (!ep) { ++count.create_failures; continue; }
    // Close at once, after one or a few progress calls, after up to 2 ms, or
    // after up to 20 ms (so that many requests wait on the target at once,
    // past its caps: where a Receiver used to reject them).
    const unsigned style = cycle % 5;
    if (style == 1) ucp_worker_progress(worker);
    else if (style == 2) for (uint64_t i = 0; i < 2 + cycle % 7; ++i) ucp_worker_progress(worker);
    else if (style >= 3) {
      const auto until = within(style == 3 ? Ms{2} : Ms{1 + cycle % 20});
      while (Clock::now() < until && !ep->failed()) ucp_worker_progress(worker);
    }
    status = ep->close(Ms{1000});
    if (status == UCS_ERR_TIMED_OUT) ++count.close_timeouts;
    else if (status != UCS_OK) ++count.close_errors;
  }
  return count;
}

// Each churner runs in a child process: UCX 1.13 aborts (async.c "handler->async
// == async") when workers of one process churn sockets in several threads, as
// a closed socket's number comes back to another worker's async context. The
// child's counts come back through a pipe; SIGALRM ends a child that hangs.
pid_t spawn_churner(const Options& options, uint64_t first, uint64_t cycles, int& read_fd) {
  int fds[2];
  std::fflush(stdout);  // a child must not print the parent's buffered lines again
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid != 0) {
    close(fds[1]);
    read_fd = fds[0];
    if (pid < 0) close(fds[0]);
    return pid;
  }
  close(fds[0]);
  alarm(static_cast<unsigned>(options.timeout) + 5);  // before the parent's watchdog
  int rc = 0;
  try {
    const ChurnCount count = churn_worker(options, first, cycles);
    rc = write(fds[1], &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count)) ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("churn: worker failed: %s\n", e.what());
    rc = 1;
  }
  std::fflush(stdout);
  std::_Exit(rc);
}

int run_churn(const Options& options) {
  const auto start = Clock::now();
  std::vector<std::pair<pid_t, int>> children;
  uint64_t first = 0;
  for (unsigned t = 0; t < options.threads; ++t) {
    const uint64_t share = options.cycles / options.threads + (t < options.cycles % options.threads ? 1 : 0);
    int fd = -1;
    const pid_t pid = spawn_churner(options, first, share, fd);
    if (pid > 0) children.emplace_back(pid, fd);
    else std::printf("churn: fork failed\n");
    first += share;
  }
  ChurnCount total;
  unsigned lost = 0;
  for (const auto& [pid, fd] : children) {
    ChurnCount count;
    const bool got = read(fd, &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count));
    close(fd);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    if (!got) {
      ++lost;
      if (WIFSIGNALED(wstatus)) std::printf("churn: worker %d died: signal %d\n", pid, WTERMSIG(wstatus));
      continue;
    }
    total.cycles += count.cycles;
    total.create_failures += count.create_failures;
    total.close_timeouts += count.close_timeouts;
    total.close_errors += count.close_errors;
  }
  const uint64_t errors = total.create_failures + total.close_timeouts + total.close_errors;
  std::printf("churn: cycles=%llu errors=%llu seconds=%.2f\n", static_cast<unsigned long long>(total.cycles),
              static_cast<unsigned long long>(errors), seconds_since(start));
  std::printf("churn: create_failures=%llu close_timeouts=%llu close_errors=%llu lost_workers=%u\n",
              static_cast<unsigned long long>(total.create_failures),
              static_cast<unsigned long long>(total.close_timeouts),
              static_cast<unsigned long long>(total.close_errors), lost);
  return lost == options.threads ? 1 : 0;
}

void start_watchdog() {  // in case UCX itself blocks past every deadline
  std::thread([] {
    std::this_thread::sleep_until(g_deadline + std::chrono::seconds(10));
    std::fputs("watchdog: overall limit exceeded, exiting\n", stdout);
    std::fflush(stdout);
    std::_Exit(1);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options options;
  if (!parse(argc, argv, options)) {
    usage();
    return 2;
  }
  g_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout));
  start_watchdog();
  try {
    if (options.mode == "rma") return run_rma(options);
    if (options.mode == "granted") return run_granted(options);
    if (options.mode == "hello") return run_hello(options);
    if (options.mode == "churn") return run_churn(options);
    if (options.mode == "half-open") return run_half_open(options);
    return run_junk_am(options);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
