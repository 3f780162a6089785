// threechains-bench: ifunc vs UCX Active Messages, side by side in one run.
//
// A driver starts a target and a source process per transport. For every mode
// and payload size the source measures
//   latency   ping-pong: send, wait until the target says it ran (half round trip)
//   rate      streaming with at most --window messages unconsumed (the ifunc
//             ring's credits; the AM baseline gets the same window)
//   first     (ifunc modes) the first call of code the target's JIT does not
//             hold: the target evicts after every frame, so each round compiles
//             or links afresh
// Modes: am (ucp_am_send_nbx to a handler that increments a counter), and
// ifunc-{bitcode,binary}-{cached,uncached} (uncached: every frame carries its
// code; the target looks it up in its cache). Output: a table with each mode's
// ratio to am, and one JSON line per measurement (--json).
#include "floor.hpp"
#include "strong_am.hpp"

#include <threechains/threechains.hpp>

#include <fmt/core.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;

namespace {

constexpr unsigned kAmBench = 0x7D01;   // source -> target: payload
constexpr unsigned kAmAck = 0x7D02;     // target -> source: how many AMs ran
constexpr unsigned kAmTotals = 0x7D03;  // source -> target: what it sent, to check at the end

struct Options {
  std::string role = "driver";
  std::vector<std::string> transports{"shm", "tcp"};
  std::vector<std::string> modes{"am",
                                 "am-strong",
                                 "ifunc-bitcode-cached",
                                 "ifunc-bitcode-uncached",
                                 "ifunc-binary-cached",
                                 "ifunc-binary-uncached"};
  std::vector<std::string> metrics{"latency", "rate", "first"};
  std::size_t min_size = 8;
  std::size_t max_size = 8;
  uint64_t iterations = 20000;
  uint64_t warmup = 2000;
  uint64_t first_rounds = 30;
  uint32_t window = 16;
  uint32_t rounds = 5;
  int target_cpu = -1;
  int source_cpu = -1;
  std::string delivery = "automatic";
  std::string am_protocol = "eager";
  std::string json;
  std::string bitcode = THREECHAINS_BENCH_BITCODE;
  std::string binary = THREECHAINS_BENCH_BINARY;
  std::string tiered = THREECHAINS_BENCH_TIERED;
  std::string prelinked = THREECHAINS_BENCH_PRELINKED;
  uint32_t first_gap_ms = 30;
  uint32_t promote_after = tc::JitOptions{}.promote_after_calls;
  uint16_t port = 0;
  std::string am_address;  // the target's strong-baseline worker, in hex
  int port_fd = -1;
  double floor_us = 0;    // the transport's physical floor, one way (floor.hpp); 0: not measured
  double floor_mps = 0;   // shm: a bare ring's rate in the same window (floor.hpp); 0: not measured
  bool confined = false;  // the target trusts the key as a (confined) code signer only
  bool checked_tier = false;  // ...in the checked tier (ConfinementOptions::window_tier off)
  int hogs = 0;              // processes that only spin beside the pair while it is measured
};

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    fmt::print(stderr, "bench: cannot pin to cpu {}\n", cpu);
}

tc::Delivery parse_delivery(const std::string& d) {
  if (d == "put") return tc::Delivery::put;
  if (d == "direct") return tc::Delivery::direct;
  if (d == "am") return tc::Delivery::active_message;
  return tc::Delivery::automatic;
}

// ---- target -------------------------------------------------------------

struct TargetState {
  uint64_t ran = 0;     // the counter ifunc increments this (target_args)
  uint64_t am_ran = 0;  // the AM handler increments this
  uint64_t acked = 0;
  uint64_t totals[3] = {~0ull, ~0ull, ~0ull};  // frames, AMs, strong AMs the source sent
  std::vector<std::byte> rndv_buffer;
  ucp_worker_h worker = nullptr;
  ucp_ep_h reply_ep = nullptr;  // where acks go: learnt from the first AM
};

ucs_status_t on_bench_am(void* arg, const void*, std::size_t, void* data, std::size_t length,
                         const ucp_am_recv_param_t* param) {
  auto* state = static_cast<TargetState*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0) state->reply_ep = param->reply_ep;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    // Large messages come by rendezvous: receive them, then count.
    if (state->rndv_buffer.size() < length) state->rndv_buffer.resize(length);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = [](void* request, ucs_status_t, std::size_t, void* user) {
      ++static_cast<TargetState*>(user)->am_ran;
      ucp_request_free(request);
    };
    p.user_data = state;
    ucs_status_ptr_t r =
        ucp_am_recv_data_nbx(state->worker, data, state->rndv_buffer.data(), length, &p);
    if (r == nullptr) ++state->am_ran;
    return UCS_OK;
  }
  ++state->am_ran;
  return UCS_OK;
}

// The AM baseline's acknowledgement mirrors the ring's credits: after each
// poll, if more have run, tell the source how many (from outside the handler).
class Acker {
 public:
  ~Acker() { finish(); }
  void maybe_ack(TargetState& state) {
    if (state.am_ran == state.acked || state.reply_ep == nullptr) return;
    if (request_ != nullptr && ucp_request_check_status(request_) == UCS_INPROGRESS) return;
    if (request_ != nullptr) ucp_request_free(request_);
    value_ = state.am_ran;
    worker_ = state.worker;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t r =
        ucp_am_send_nbx(state.reply_ep, kAmAck, &value_, sizeof(value_), nullptr, 0, &p);
    request_ = UCS_PTR_IS_ERR(r) ? nullptr : r;
    state.acked = value_;
  }
  void finish() {
    if (request_ == nullptr) return;
    while (ucp_request_check_status(request_) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(request_);
    request_ = nullptr;
  }

 private:
  uint64_t value_ = 0;
  void* request_ = nullptr;
  ucp_worker_h worker_ = nullptr;
};

ucs_status_t on_totals(void* arg, const void* header, std::size_t length, void*, std::size_t,
                       const ucp_am_recv_param_t*) {
  if (length == 3 * sizeof(uint64_t))
    std::memcpy(static_cast<TargetState*>(arg)->totals, header, length);
  return UCS_OK;
}

int run_target(const Options& o) {
  pin(o.target_cpu);
  tc::Worker worker(tc::Context({.transport = tc::parse_transport(o.transports.front())}));
  TargetState state;
  state.worker = worker.handle();
  const bool evict_each = o.metrics.size() == 1 && o.metrics.front() == "first";
  // Secured as in deployment: the source proves the build's development key,
  // which also signed the counter. The rings are what the run asks for.
  const tc::PublicKey key = tc::KeyPair::load(THREECHAINS_DEV_KEY).public_key();
  tc::Trust trust = tc::Trust().allow_peer(key);
  if (o.confined) {
    trust.allow_code_signer(key);  // bitcode runs confined; binary code is refused
  } else {
    trust.allow_native_code_signer(key);
  }
  tc::JitOptions jit{.promote_after_calls = o.promote_after};
  jit.confinement.window_tier = !o.checked_tier;
  tc::Receiver receiver(worker, {.trust = trust,
                                 .limits = {.max_ring_bytes_per_peer = std::size_t{1} << 40,
                                            .max_ring_bytes = std::size_t{1} << 40},
                                 .max_slot_size = o.max_size + (64 << 10),
                                 .target_args = &state.ran,
                                 .target_args_bytes = sizeof(state.ran),
                                 .jit = jit,
                                 // Spins for good: its loop also progresses the strong
                                 // baseline's worker, whose messages would not wake it.
                                 .progress = {.sleep_when_idle = false}});
  // Confined, the counter lives where a user of the window tier (the
  // default) puts it: in memory exposed to windows, so that the code takes
  // that tier (a target_args elsewhere would keep it in the checked one).
  uint64_t* counter = &state.ran;
  if (o.confined && !o.checked_tier) {
    counter = reinterpret_cast<uint64_t*>(
        receiver.cache().allocate_exposed("counter", sizeof(uint64_t), true).data());
    receiver.set_target_args(counter, sizeof(uint64_t));
  }
  worker.set_am_handler(kAmBench, &on_bench_am, &state);
  worker.set_am_handler(kAmTotals, &on_totals, &state);
  // The strong AM baseline: a worker of its own, reached by its address.
  bench::StrongAmPeer strong(tc::parse_transport(o.transports.front()));
  TargetState strong_state;
  strong_state.worker = strong.worker();
  {
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = kAmBench;
    handler.cb = &on_bench_am;
    handler.arg = &strong_state;
    tc::check(ucp_worker_set_am_recv_handler(strong.worker(), &handler),
              "ucp_worker_set_am_recv_handler");
  }
  const std::string port = std::to_string(receiver.port()) + " " + strong.address_hex() + "\n";
  if (write(o.port_fd, port.data(), port.size()) != static_cast<ssize_t>(port.size())) return 3;
  close(o.port_fd);

  Acker ack;
  Acker strong_ack;
  std::vector<double> compile_us;
  receiver.run([&] {
    if (evict_each && receiver.cache().size() != 0) {
      compile_us.push_back(
          std::chrono::duration<double, std::micro>(receiver.stats().last_load_time).count());
      receiver.cache().clear();
    }
    ucp_worker_progress(strong.worker());
    ack.maybe_ack(state);
    strong_ack.maybe_ack(strong_state);
    // Done when the ifunc channel closed. Not "closed and not lost": over
    // shared memory the source's goodbye (an AM in the shm queue) and its
    // endpoint's close (seen on the tcp connection) race, and a target that
    // sees the close first drops the goodbye and counts the peer as lost;
    // under oversubscription that happened and this loop never ended. Every
    // frame ran either way: the source flushed before it said goodbye.
    return receiver.stats().peers_closed >= 1;
  });
  ack.finish();
  strong_ack.finish();
  state.ran = *counter;
  // Every message the source sent ran exactly once.
  if (state.totals[0] != state.ran || state.totals[1] != state.am_ran ||
      state.totals[2] != strong_state.am_ran || state.ran != receiver.stats().frames_dispatched) {
    fmt::print(stderr,
               "bench target: ran {} ifuncs, {} AMs and {} strong AMs, the source sent {}, {} "
               "and {}\n",
               state.ran, state.am_ran, strong_state.am_ran, state.totals[0], state.totals[1],
               state.totals[2]);
    return 1;
  }
  fmt::print("  target: {} ifuncs, {} AMs and {} strong AMs ran, as many as were sent\n", state.ran,
             state.am_ran, strong_state.am_ran);
  // The source sends --first-rounds frames of bitcode, then as many of binary
  // (an object JITLink links), of pre-linked binary (mapped, no linker), and
  // of tiered (whose first call links its object: tier 0).
  for (const char* codec : {"bitcode", "binary", "pre-linked binary", "tiered"}) {
    const std::size_t n = std::min<std::size_t>(o.first_rounds, compile_us.size());
    if (n == 0) break;
    std::vector<double> rounds(compile_us.begin(),
                               compile_us.begin() + static_cast<std::ptrdiff_t>(n));
    compile_us.erase(compile_us.begin(), compile_us.begin() + static_cast<std::ptrdiff_t>(n));
    std::sort(rounds.begin(), rounds.end());
    fmt::print(
        "  target: {} first call, {} of fresh code: median {:.1f} us, min {:.1f} us ({} "
        "rounds)\n",
        codec,
        std::string(codec) == "bitcode"             ? "JIT compile"
        : std::string(codec) == "pre-linked binary" ? "load (mapped, no linker)"
                                                    : "JITLink link",
        rounds[rounds.size() / 2], rounds.front(), rounds.size());
  }
  return 0;
}

// ---- source -------------------------------------------------------------

struct Result {
  std::string transport, mode, metric;
  std::size_t size = 0;
  double value = 0;  // us for latency/first, M msg/s for rate
  std::size_t frame_bytes = 0;
  std::string protocol;  // AM modes: eager, or UCX's choice (rendezvous when large)
};

class JsonOut {
 public:
  explicit JsonOut(const std::string& path)
      : file_(path.empty() ? nullptr : std::fopen(path.c_str(), "a")) {}
  ~JsonOut() {
    if (file_ != nullptr) std::fclose(file_);
  }
  // `confinement`: how the target ran the ifunc ("none"; "default", the
  // window tier where the code takes it; "checked_tier"); `slots`: the ring.
  void write(const Result& r, const std::string& delivery, const std::string& confinement,
             uint32_t slots) {
    if (file_ == nullptr) return;
    fmt::print(
        file_,
        "{{\"transport\":\"{}\",\"mode\":\"{}\",\"metric\":\"{}\",\"payload\":{},\"value\":{:.4f},"
        "\"unit\":\"{}\",\"frame_bytes\":{},\"delivery\":\"{}\",\"protocol\":\"{}\","
        "\"confinement\":\"{}\",\"slots\":{}}}\n",
        r.transport, r.mode, r.metric, r.size, r.value, r.metric == "rate" ? "Mmsg/s" : "us",
        r.frame_bytes, delivery, r.protocol, confinement, slots);
    std::fflush(file_);
  }
  // A floor measured by the driver (floor.hpp), in its own unit.
  void write_floor(const std::string& transport, const std::string& name, double value,
                   const char* unit) {
    if (file_ == nullptr) return;
    fmt::print(file_,
               "{{\"transport\":\"{}\",\"floor\":\"{}\",\"value\":{:.4f},\"unit\":\"{}\"}}\n",
               transport, name, value, unit);
    std::fflush(file_);
  }
  void write_ratio(const std::string& transport, const std::string& name, double value) {
    if (file_ == nullptr) return;
    fmt::print(file_, "{{\"transport\":\"{}\",\"ratio\":\"{}\",\"value\":{:.4f}}}\n", transport,
               name, value);
    std::fflush(file_);
  }

 private:
  std::FILE* file_;
};

// The AM baseline: the same payload to a handler that counts, acknowledged
// like the ring's credits.
class AmBaseline {
 public:
  // `eager`: every size eager (as frames go); otherwise UCX picks the protocol.
  AmBaseline(ucp_worker_h worker, ucp_ep_h ep, bool eager)
      : worker_(worker), ep_(ep), eager_(eager) {
    set_ack_handler(this);
  }
  ~AmBaseline() { set_ack_handler(nullptr); }
  AmBaseline(const AmBaseline&) = delete;
  AmBaseline& operator=(const AmBaseline&) = delete;

  void send(const std::byte* data, std::size_t size) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY | (eager_ ? UCP_AM_SEND_FLAG_EAGER : 0);
    ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kAmBench, nullptr, 0, data, size, &p);
    if (UCS_PTR_IS_ERR(r)) tc::check(UCS_PTR_STATUS(r), "ucp_am_send_nbx");
    if (r != nullptr) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(r);
    }
    ++sent_;
  }
  void wait_until(uint64_t count) {
    while (acked_ < count) ucp_worker_progress(worker_);
  }
  [[nodiscard]] uint64_t sent() const { return sent_; }
  [[nodiscard]] uint64_t acked() const { return acked_; }
  [[nodiscard]] bool eager() const { return eager_; }
  void set_eager(bool eager) { eager_ = eager; }
  void progress() { ucp_worker_progress(worker_); }

 private:
  void set_ack_handler(AmBaseline* self) {
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = kAmAck;
    handler.cb = self != nullptr ? &on_ack : nullptr;
    handler.arg = self;
    (void)ucp_worker_set_am_recv_handler(worker_, &handler);
  }
  static ucs_status_t on_ack(void* arg, const void* header, std::size_t length, void*, std::size_t,
                             const ucp_am_recv_param_t*) {
    if (length == sizeof(uint64_t))
      std::memcpy(&static_cast<AmBaseline*>(arg)->acked_, header, sizeof(uint64_t));
    return UCS_OK;
  }
  ucp_worker_h worker_;  // both outlive this baseline (the source's Worker and
  ucp_ep_h ep_;          // Channel, or the StrongAmPeer declared before it)
  uint64_t sent_ = 0;
  uint64_t acked_ = 0;
  bool eager_;
};

int run_source(const Options& o) {
  pin(o.source_cpu);
  const std::string transport = o.transports.front();
  tc::Worker worker(tc::Context({.transport = tc::parse_transport(transport)}));
  const tc::Ifunc bitcode = tc::Ifunc::load(o.bitcode);
  const tc::Ifunc binary = tc::Ifunc::load(o.binary);
  const tc::Ifunc tiered = tc::Ifunc::load(o.tiered);
  const tc::Ifunc prelinked = tc::Ifunc::load(o.prelinked);
  tc::Source source(worker);
  const std::size_t code = std::max(
      {bitcode.code().size(), binary.code().size(), tiered.code().size(), prelinked.code().size()});
  tc::Channel channel = source.connect("127.0.0.1", o.port,
                                       {.slots = o.window,
                                        .slot_size = o.max_size + code + 128,
                                        .delivery = parse_delivery(o.delivery),
                                        .identity = tc::KeyPair::load(THREECHAINS_DEV_KEY)});
  const std::string delivery = channel.delivery() == tc::Delivery::direct ? "direct"
                               : channel.delivery() == tc::Delivery::put  ? "put"
                                                                          : "am";
  const std::string confinement = !o.confined      ? "none"
                                  : o.checked_tier ? "checked_tier"
                                                   : "default";
  // The AM baseline shares the worker; the target's ack handler finds it by endpoint.
  // On the channel's own endpoint: the target accepts only endpoints that
  // authenticate, and one connection carries both, as a user's own AMs would.
  // Eager at every size: with peer error handling UCX 1.13 gives these
  // contexts no shared-memory zero-copy lane, so its rendezvous would move
  // large AMs over tcp; eager is the best AM can do there (and what frames use).
  AmBaseline am(worker.handle(), channel.endpoint().handle(), o.am_protocol == "eager");
  bench::StrongAmPeer strong(tc::parse_transport(transport));
  if (o.am_address.empty())
    throw std::runtime_error("no --am-address: the strong AM baseline needs the target's");
  strong.connect(o.am_address);
  AmBaseline strong_am(strong.worker(), strong.endpoint(), false);
  // The counter adds the payload's first 8 bytes (little-endian): make that 1.
  std::vector<std::byte> payload(std::max<std::size_t>(o.max_size, 8), std::byte{0});
  payload[0] = std::byte{1};
  JsonOut json(o.json);
  std::vector<Result> results;

  // Target acks AMs to the endpoint it learns from the first AM: prime it.
  am.send(payload.data(), 8);
  am.wait_until(1);
  strong_am.send(payload.data(), 8);
  strong_am.wait_until(1);

  // Modes take turns, round after round, and each figure is the median of its
  // rounds: on a shared, noisy machine that keeps the ratios honest.
  const auto measure_one = [&](const std::string& mode, const std::string& metric,
                               std::size_t size) -> Result {
    const bool is_am = mode == "am" || mode == "am-strong";
    AmBaseline& base = mode == "am-strong" ? strong_am : am;
    const tc::Ifunc& ifunc = mode.find("binary") != std::string::npos ? binary : bitcode;
    const bool uncached = mode.find("uncached") != std::string::npos;
    const auto send_one = [&] {
      if (is_am) {
        base.send(payload.data(), size);
      } else {
        if (uncached) channel.forget_held_code();
        (void)tc::send(channel, ifunc, std::span<const std::byte>(payload.data(), size));
      }
    };
    const auto wait_all = [&] {
      if (is_am) {
        base.wait_until(base.sent());
      } else {
        channel.flush();
      }
    };
    const auto in_flight = [&]() -> uint64_t { return base.sent() - base.acked(); };
    const bool pingpong = metric == "latency";
    const bool windowed_am = !pingpong && is_am;
    const uint64_t n = pingpong ? std::max<uint64_t>(o.iterations / 4, 100) : o.iterations;
    for (uint64_t i = 0; i < o.warmup; ++i) {
      send_one();
      if (pingpong) wait_all();
    }
    wait_all();
    const auto start = Clock::now();
    for (uint64_t i = 0; i < n; ++i) {
      if (windowed_am) {
        while (in_flight() >= o.window) base.progress();
      }
      send_one();
      if (pingpong) wait_all();
    }
    wait_all();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    Result r{transport, mode, metric, size, 0, is_am ? size : channel.stats().last_frame_size};
    r.value = metric == "latency" ? seconds * 1e6 / double(n) / 2 : double(n) / seconds / 1e6;
    if (is_am) r.protocol = base.eager() ? "eager" : "auto";
    return r;
  };
  // The strong baseline is what a user would pick at each size: eager, or
  // UCX's own choice (rendezvous, zero copy over cma on shared memory), the
  // better of the two in each round.
  const auto measure = [&](const std::string& mode, const std::string& metric,
                           std::size_t size) -> Result {
    if (mode != "am-strong") return measure_one(mode, metric, size);
    strong_am.set_eager(true);
    const Result eager = measure_one(mode, metric, size);
    strong_am.set_eager(false);
    const Result automatic = measure_one(mode, metric, size);
    const bool eager_wins =
        metric == "rate" ? eager.value >= automatic.value : eager.value <= automatic.value;
    return eager_wins ? eager : automatic;
  };
  for (std::size_t size = o.min_size; size <= o.max_size; size *= 2) {
    for (const std::string& metric : o.metrics) {
      if (metric == "first") continue;
      std::map<std::string, std::vector<Result>> rounds;
      for (uint32_t round = 0; round < o.rounds; ++round) {
        for (const std::string& mode : o.modes) rounds[mode].push_back(measure(mode, metric, size));
      }
      for (const std::string& mode : o.modes) {
        std::vector<Result>& rs = rounds[mode];
        std::sort(rs.begin(), rs.end(),
                  [](const Result& a, const Result& b) { return a.value < b.value; });
        const Result& median = rs[rs.size() / 2];
        json.write(median, delivery, confinement, o.window);
        results.push_back(median);
      }
    }
  }

  // First calls: fresh code on the target each round (it evicts after each
  // frame), measured as a round trip (send, then flush: the target consumed
  // it). Rounds are --first-gap-ms apart, so each finds the target idle: a
  // tiered round's background compile of the round before is over.
  if (std::find(o.metrics.begin(), o.metrics.end(), "first") != o.metrics.end()) {
    std::map<std::string, double> first_rtt;
    const std::pair<const char*, const tc::Ifunc*> kinds[] = {{"ifunc-bitcode", &bitcode},
                                                              {"ifunc-binary", &binary},
                                                              {"ifunc-prelinked", &prelinked},
                                                              {"ifunc-tiered", &tiered}};
    for (const auto& [mode, ifunc] : kinds) {
      std::vector<double> rtt;
      for (uint64_t i = 0; i < o.first_rounds; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(o.first_gap_ms));
        channel.forget_held_code();
        const auto start = Clock::now();
        (void)tc::send(channel, *ifunc, std::span<const std::byte>(payload.data(), 8));
        channel.flush();
        rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
      std::sort(rtt.begin(), rtt.end());
      Result r{transport, mode, "first", 8, rtt[rtt.size() / 2], channel.stats().last_frame_size};
      first_rtt[mode] = r.value;
      json.write(r, delivery, confinement, o.window);
      results.push_back(r);
    }
    // The cached AM round trip in the same run, for the ratios the first call
    // is held to.
    std::vector<double> am_rtt;
    for (uint32_t round = 0; round < o.rounds; ++round)
      am_rtt.push_back(2 * measure("am", "latency", 8).value);
    std::sort(am_rtt.begin(), am_rtt.end());
    const double am_us = am_rtt[am_rtt.size() / 2];
    const double tiered_vs_object = first_rtt["ifunc-tiered"] / first_rtt["ifunc-binary"];
    const double object_vs_am = first_rtt["ifunc-binary"] / am_us;
    const double bitcode_vs_object = first_rtt["ifunc-bitcode"] / first_rtt["ifunc-binary"];
    const double prelinked_vs_am = first_rtt["ifunc-prelinked"] / am_us;
    fmt::print(
        "  first call (round trip, median of {}): bitcode {:.1f} us, binary {:.1f} us, "
        "pre-linked binary {:.1f} us, tiered {:.1f} us; cached AM round trip {:.2f} us\n"
        "  ratios: tiered / binary {:.2f}x, binary / cached AM round trip {:.2f}x, pre-linked / "
        "cached AM round trip {:.2f}x, bitcode / binary {:.2f}x\n",
        o.first_rounds, first_rtt["ifunc-bitcode"], first_rtt["ifunc-binary"],
        first_rtt["ifunc-prelinked"], first_rtt["ifunc-tiered"], am_us, tiered_vs_object,
        object_vs_am, prelinked_vs_am, bitcode_vs_object);
    json.write_ratio(transport, "first_prelinked_vs_am_rtt", prelinked_vs_am);
    json.write_ratio(transport, "first_tiered_vs_binary", tiered_vs_object);
    json.write_ratio(transport, "first_binary_vs_am_rtt", object_vs_am);
    json.write_ratio(transport, "first_bitcode_vs_binary", bitcode_vs_object);
  }

  // The table: every figure beside both baselines' for the same metric and size.
  std::map<std::pair<std::string, std::size_t>, double> am_value;
  std::map<std::pair<std::string, std::size_t>, double> strong_value;
  for (const Result& r : results) {
    if (r.mode == "am") am_value[{r.metric, r.size}] = r.value;
    if (r.mode == "am-strong") strong_value[{r.metric, r.size}] = r.value;
  }
  const auto ratio = [](const auto& values, const Result& r) {
    const auto it = values.find({r.metric, r.size});
    return it == values.end() || r.mode.rfind("am", 0) == 0
               ? std::string()
               : fmt::format("{:.2f}x", r.value / it->second);
  };
  // Latency against the physical floor (one way, like the latency figures);
  // an 8-byte rate against a bare ring's (a fraction: 1.0 is the ring's).
  const auto floor_ratio = [&](const Result& r) {
    if (r.metric == "latency" && o.floor_us > 0)
      return fmt::format("{:.1f}x", r.value / o.floor_us);
    if (r.metric == "rate" && r.size <= 8 && o.floor_mps > 0)
      return fmt::format("{:.2f}x", r.value / o.floor_mps);
    return std::string();
  };
  if (o.floor_us > 0) json.write_floor(transport, "one_way_latency", o.floor_us, "us");
  if (o.floor_mps > 0) json.write_floor(transport, "ring_rate", o.floor_mps, "Mmsg/s");
  fmt::print("  {:<24} {:<8} {:>9} {:>12} {:>8} {:>10} {:>9} {:>10}  (delivery: {})\n", "mode",
             "metric", "payload", "value", "vs am", "vs strong", "vs floor", "frame B", delivery);
  for (const Result& r : results) {
    fmt::print("  {:<24} {:<8} {:>9} {:>9.3f} {:<2} {:>8} {:>10} {:>9} {:>10}  {}\n", r.mode,
               r.metric, r.size, r.value, r.metric == "rate" ? "M/s" : "us", ratio(am_value, r),
               ratio(strong_value, r), floor_ratio(r), r.frame_bytes, r.protocol);
    if (r.metric == "latency" && o.floor_us > 0)
      json.write_ratio(transport, r.mode + "_latency_" + std::to_string(r.size) + "_vs_floor",
                       r.value / o.floor_us);
    if (r.metric == "rate" && r.size <= 8 && o.floor_mps > 0)
      json.write_ratio(transport, r.mode + "_rate_" + std::to_string(r.size) + "_vs_ring_floor",
                       r.value / o.floor_mps);
  }
  std::fflush(stdout);
  channel.flush();
  const uint64_t totals[3] = {channel.stats().frames_sent, am.sent(), strong_am.sent()};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  tc::Request request(ucp_am_send_nbx(channel.endpoint().handle(), kAmTotals, totals,
                                      sizeof(totals), nullptr, 0, &p),
                      "ucp_am_send_nbx(totals)");
  tc::check(request.wait(worker, std::chrono::seconds(10)), "ucp_am_send_nbx(totals)");
  channel.close();
  return 0;
}

// A process that spins until killed (--hog): a CPU-bound neighbour on a
// shared node, taking its share of the cores.
pid_t start_hog() {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork (--hog) failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the driver, whatever ends it
    volatile uint64_t spin = 0;
    for (;;) spin = spin + 1;
  }
  return pid;
}

int drive(const std::string& transport, const std::vector<std::string>& args, int hogs) {
  fmt::print("== {} ==\n", transport);
  std::fflush(stdout);
  int fds[2];
  if (pipe(fds) != 0) return 2;
  const auto exec_self = [&](const std::string& role, const std::vector<std::string>& extra) {
    // THREECHAINS_BENCH_WRAP_TARGET / _SOURCE: a command (words split at
    // spaces) that runs that side, to profile one side alone, e.g.
    // "valgrind --tool=callgrind --callgrind-out-file=target.out".
    char self[4096] = {};
    if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) _exit(127);
    std::vector<std::string> argv;
    if (const char* wrap = std::getenv(role == "target" ? "THREECHAINS_BENCH_WRAP_TARGET"
                                                        : "THREECHAINS_BENCH_WRAP_SOURCE")) {
      std::istringstream words(wrap);
      for (std::string word; words >> word;) argv.push_back(word);
    }
    argv.insert(argv.end(), {self, "--role", role, "--transports", transport});
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<char*> c;
    for (std::string& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execvp(c[0], c.data());
    _exit(127);
  };
  const pid_t target = fork();
  if (target == 0) {
    close(fds[0]);
    exec_self("target", {"--port-fd", std::to_string(fds[1])});
  }
  close(fds[1]);
  // "<port> <strong-baseline worker address in hex>\n"
  std::string line;
  char c = 0;
  while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  close(fds[0]);
  const std::size_t space = line.find(' ');
  if (line.empty() || space == std::string::npos) return 2;
  const std::string port = line.substr(0, space);
  const std::string address = line.substr(space + 1);
  // After the target measured nothing and before the source starts: the
  // hogs spin through every measurement, ifunc and AM alike (they take turns).
  std::vector<pid_t> hog_pids;
  for (int h = 0; h < hogs; ++h) hog_pids.push_back(start_hog());
  if (hogs > 0) fmt::print("== {} CPU hog(s) spin beside source and target ==\n", hogs);
  std::fflush(stdout);
  const pid_t source = fork();
  if (source == 0) exec_self("source", {"--port", port, "--am-address", address});
  int s = 0;
  int t = 0;
  waitpid(source, &s, 0);
  waitpid(target, &t, 0);
  for (const pid_t hog : hog_pids) {
    ::kill(hog, SIGKILL);
    waitpid(hog, nullptr, 0);
  }
  return WIFEXITED(s) && WEXITSTATUS(s) == 0 && WIFEXITED(t) && WEXITSTATUS(t) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"ThreeChains benchmark: ifunc vs UCX Active Messages"};
  app.add_option("--role", o.role)->check(CLI::IsMember({"driver", "target", "source"}));
  app.add_option("--transports", o.transports, "shm, tcp")->delimiter(',');
  app.add_option("--modes", o.modes, "am, ifunc-{bitcode,binary}-{cached,uncached}")
      ->delimiter(',');
  app.add_option("--metrics", o.metrics, "latency, rate, first")->delimiter(',');
  app.add_option("--min-size", o.min_size, "smallest payload (bytes)");
  app.add_option("--max-size", o.max_size, "largest payload (bytes); sizes double from min to max");
  app.add_option("-n,--iterations", o.iterations,
                 "messages per rate measurement (latency: a quarter)");
  app.add_option("--warmup", o.warmup, "messages before each measurement");
  app.add_option("--first-rounds", o.first_rounds, "fresh-code first calls per codec");
  app.add_option("--window", o.window, "unconsumed messages allowed (ring slots)")
      ->check(CLI::Range(1, 64));  // a Receiver grants at most 64 (ReceiverOptions::max_slots)
  app.add_option("--rounds", o.rounds,
                 "measurements per figure, modes taking turns; the median is reported")
      ->check(CLI::Range(1, 1000));
  app.add_option("--target-cpu", o.target_cpu, "pin the target process");
  app.add_option("--source-cpu", o.source_cpu, "pin the source process");
  app.add_option("--delivery", o.delivery, "automatic, direct, put, am")
      ->check(CLI::IsMember({"automatic", "direct", "put", "am"}));
  app.add_option("--am-protocol", o.am_protocol,
                 "AM baseline: eager (every size) or auto (UCX picks rendezvous)")
      ->check(CLI::IsMember({"eager", "auto"}));
  app.add_option("--json", o.json, "append one JSON line per measurement to this file");
  app.add_option("--bitcode", o.bitcode, "counter ifunc, bitcode container");
  app.add_option("--binary", o.binary, "counter ifunc, binary container");
  app.add_option("--tiered", o.tiered, "counter ifunc, tiered container (first calls)");
  app.add_option("--prelinked", o.prelinked,
                 "counter ifunc, binary container packed PRELINKED (first calls)");
  app.add_option("--first-gap-ms", o.first_gap_ms, "pause before each first call (ms)");
  app.add_option("--promote-after", o.promote_after,
                 "target: compile tiered code for its CPU once it ran this many times");
  app.add_option("--port", o.port);
  app.add_option("--am-address", o.am_address);
  app.add_option("--port-fd", o.port_fd);
  // The driver's measurements of the floors, passed to the source.
  app.add_option("--floor-us", o.floor_us);
  app.add_option("--floor-mps", o.floor_mps);
  app.add_option("--hog", o.hogs,
                 "processes that only spin beside source and target while they are measured");
  app.add_flag("--confined", o.confined,
               "the target runs the counter confined (use bitcode modes: binary is refused)");
  app.add_flag("--checked-tier", o.checked_tier,
               "as --confined, in the checked tier (ConfinementOptions::window_tier off; "
               "confined code takes the window tier by default where it can)");
  bool window_tier = false;
  app.add_flag("--window-tier", window_tier,
               "as --confined (the window tier is the default; kept for older scripts)");
  CLI11_PARSE(app, argc, argv);
  if (window_tier || o.checked_tier) o.confined = true;
  try {
    if (o.role == "target") return run_target(o);
    if (o.role == "source") return run_source(o);
    // Driver: everything but role/transports is passed through; "first" runs
    // in a pair of its own, since its target evicts after every frame.
    std::vector<std::string> pass;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--transports" || a == "--metrics" || a == "--modes") {
        ++i;
        continue;
      }
      pass.push_back(a);
    }
    int rc = 0;
    const bool first = std::find(o.metrics.begin(), o.metrics.end(), "first") != o.metrics.end();
    std::vector<std::string> steady;
    for (const std::string& m : o.metrics) {
      if (m != "first") steady.push_back(m);
    }
    std::string modes;
    for (const std::string& m : o.modes) modes += (modes.empty() ? "" : ",") + m;
    for (const std::string& t : o.transports) {
      if (!steady.empty()) {
        std::vector<std::string> args = pass;
        // The floor first, here, where no UCX runs yet (floor.hpp).
        const bool latency = std::find(steady.begin(), steady.end(), "latency") != steady.end();
        if (latency && o.floor_us <= 0) {
          const double floor = t == "tcp" ? bench::tcp_loopback_floor_us(20000, 3)
                                          : bench::cache_line_floor_us(200000, 3);
          fmt::print("== floor over {}: {} {:.3f} us one way ==\n", t,
                     t == "tcp" ? "8-byte loopback TCP ping-pong (plain sockets, spinning recv)"
                                : "one cache line ping-ponged between two processes",
                     floor);
          args.push_back("--floor-us");
          args.push_back(fmt::format("{:.6f}", floor));
        }
        const bool rate = std::find(steady.begin(), steady.end(), "rate") != steady.end();
        if (rate && t == "shm" && o.floor_mps <= 0) {
          const double floor = bench::ring_rate_floor_mps(o.window, 2000000, 3);
          fmt::print(
              "== floor over shm: a bare ring of {} slots between two processes, {:.3f} "
              "M frames/s ==\n",
              o.window, floor);
          args.push_back("--floor-mps");
          args.push_back(fmt::format("{:.6f}", floor));
        }
        args.push_back("--modes");
        args.push_back(modes);
        std::string joined;
        for (const std::string& m : steady) joined += (joined.empty() ? "" : ",") + m;
        args.push_back("--metrics");
        args.push_back(joined);
        rc |= drive(t, args, o.hogs);
      }
      if (first) {
        std::vector<std::string> args = pass;
        args.push_back("--metrics");
        args.push_back("first");
        args.push_back("--modes");
        args.push_back("ifunc-bitcode-uncached");
        rc |= drive(t, args, o.hogs);
      }
    }
    return rc;
  } catch (const std::exception& e) {
    fmt::print(stderr, "threechains-bench ({}): {}\n", o.role, e.what());
    return 1;
  }
}
