// Node: one process of a mesh of ranks that send ifuncs to each other (X-RDMA).
// It is a Receiver (for frames sent to it) and a Channel to every other rank,
// all on one Worker and one connection per pair of ranks, and it is the
// runtime that injected code calls through <threechains/runtime.h>: sends from
// inside an ifunc are queued and carried out by poll() after the ifunc returns
// — never a re-entrant UCX progress, never a wait for credits inside a
// dispatch, never a deeper stack.
#pragma once

#include <threechains/channel.hpp>
#include <threechains/receiver.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace threechains {

namespace detail {
struct NodeCore;
}

struct NodeAddress {
  std::string host;
  uint16_t port = 0;
};

struct NodeOptions {
  // Port, target_args, JIT options and error callback of this rank's Receiver.
  // on_error also hears of sends from injected code that cannot be carried out
  // (an ifunc name this rank does not hold, a rank out of range).
  ReceiverOptions receiver;
  ChannelOptions channel;        // ring geometry and delivery of the channels to other ranks
  uint32_t sends_per_poll = 64;  // queued sends carried out per poll, at most
  // The queue of sends made by injected code (threechains_send_self/_named)
  // holds at most this many, and this many payload bytes; a send past
  // either returns -1 to the ifunc (NodeStats::failed_sends counts it), so
  // one frame whose code sends in a loop cannot grow the target without bound.
  std::size_t max_queued_sends = 65536;
  std::size_t max_queued_bytes = std::size_t{64} << 20;
  // Empty polls before run() yields the CPU. Ranks of a mesh wait on each
  // other; on a machine with fewer cores than ranks, a short spin keeps the
  // rank that has work from waiting for a time slice.
  uint32_t yield_after = 16;
  // Over tcp (Active Message delivery) a credit is a message of its own. With
  // this set, while frames keep arriving from a rank this Node also sends to,
  // a poll holds that rank's credit back for one poll, so the program's next
  // frame to it (the next request of a request-reply loop) carries it for
  // free: the 1-server pointer chase over tcp goes from 0.87x to 0.95x of the
  // AM chase. The price: a credit then leaves only with a later poll, send,
  // flush or close of this Node. A program that polls and then blocks outside
  // ThreeChains (its own barrier, a socket) while the other rank flushes makes
  // that rank wait, so it is off by default.
  bool defer_credits = false;
};

struct NodeStats {
  uint64_t local_dispatches = 0;  // ifuncs an ifunc sent to its own rank
  uint64_t sends = 0;             // ifuncs sent to other ranks from injected code
  uint64_t failed_sends = 0;      // sends from injected code that could not be carried out
  std::size_t max_queued = 0;     // the deepest the send queue got
};

class Node {
 public:
  Node(Worker worker, int64_t rank, int64_t ranks, NodeOptions options = {});
  Node(Node&& other) noexcept;
  // Lets go of the Node it replaces first (without waiting for its peers).
  Node& operator=(Node&& other) noexcept;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();

  [[nodiscard]] uint16_t port() const noexcept;
  [[nodiscard]] int64_t rank() const noexcept;
  [[nodiscard]] int64_t ranks() const noexcept;
  [[nodiscard]] Receiver& receiver() noexcept;
  [[nodiscard]] const Worker& worker() const noexcept;
  [[nodiscard]] const NodeStats& stats() const noexcept;
  [[nodiscard]] std::size_t queued() const noexcept;

  // Connects to every other rank (addresses[r] is rank r's Receiver; this
  // rank's own entry is ignored): one connection per pair, opened by the lower
  // rank, carrying both directions. Serves this rank's Receiver meanwhile.
  void connect(const std::vector<NodeAddress>& addresses);

  // Makes an object of this process reachable from injected code by name
  // (threechains_lookup). Confined code gets its address but can touch none
  // of it: give its bytes for that.
  void expose(const std::string& name, void* object);
  // The same, and confined code may read (and, if `writable`, write) `bytes`.
  void expose(const std::string& name, std::span<std::byte> bytes, bool writable);

  // Sends `ifunc` with `value` to `rank` from host code (not from inside an
  // ifunc: there, use the runtime). Serves this rank's Receiver while the
  // destination's ring is full.
  template <TriviallyCopyablePayload T>
  void send(int64_t rank, const Ifunc& ifunc, const T& value) {
    send_bytes(rank, ifunc, std::as_bytes(std::span(&value, 1)));
  }
  void send_bytes(int64_t rank, const Ifunc& ifunc, std::span<const std::byte> payload);

  // Receives and runs frames, then carries out what the ifuncs queued.
  unsigned poll();

  template <class StopCondition>
  void run(StopCondition&& stop) {
    detail::serve_until([this] { return serve_round(); },
                        [this](std::chrono::milliseconds limit) { (void)wait(limit); }, stop,
                        progress_options(), yield_after());
  }
  // Sleeps until there may be work or `limit` passed (Receiver::wait).
  bool wait(std::chrono::milliseconds limit);
  // Ends a wait() now; any thread.
  void wake() noexcept;

  // Serves (receives, runs, carries out queued sends) on a progress thread of
  // its own; while it runs the Worker is that thread's: poll(), send() and the
  // channels wait for stop(). Throws errc::invalid_argument if it runs already.
  void start();
  // Joins the progress thread; safe if none runs. The destructor calls it.
  void stop() noexcept;

  // The channel to another rank (to send your own Active Messages on its endpoint).
  [[nodiscard]] Channel& channel(int64_t rank);

  // Finishes queued sends and closes every channel (each says goodbye).
  void close();

 private:
  [[nodiscard]] unsigned yield_after() const noexcept;
  [[nodiscard]] const ProgressOptions& progress_options() const noexcept;
  unsigned serve_round();  // poll(), counting the worker's events as work too
  std::unique_ptr<detail::NodeCore> core_;
};

}  // namespace threechains
