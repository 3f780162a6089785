// threechains::Receiver — the target side of ThreeChains (not a std::execution
// receiver). It listens for Sources, maps one ring of frame slots per connected
// source, and poll() dispatches each committed frame into the JIT cache:
// main(payload, payload_size, target_args). A bad frame is reported and
// skipped; the Receiver keeps serving.
//
// A Receiver is a handle on its Worker's engine (src/engine), which keeps the
// peers, their rings and the code; one Receiver per Worker.
#pragma once

#include <threechains/detail/spin.hpp>
#include <threechains/error.hpp>
#include <threechains/gpu.hpp>
#include <threechains/jit_cache.hpp>
#include <threechains/progress.hpp>
#include <threechains/trust.hpp>
#include <threechains/ucx/worker.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace threechains {

namespace detail {
class Engine;
struct NodeCore;
}  // namespace detail

// What one Receiver lets its peers use. A request beyond a limit is refused
// (a peer, a ring) or shrunk (a ring to the per-peer budget); the cache
// evicts its least recently used ifunc, which comes back through the
// cache-miss path when a frame needs it again.
struct ReceiverLimits {
  // Connected, or still proving who they are. A connected peer costs its
  // ring (max_ring_bytes caps them all: with the default 2 MiB rings, 128
  // fit; ask for smaller rings to have more) and 13-24 KiB besides (UCX's
  // endpoint; measured), and nothing per poll while idle (its ring goes
  // cold). UCX 1.13 watches at most UCX_ASYNC_MAX_EVENTS descriptors per
  // worker (default 1024, one per connection): for more than ~1000 peers set
  // it higher in the environment before the process starts.
  uint32_t max_peers = 1024;
  // Connected, not yet proven: at most this many in all, and at most
  // max_pending_per_address from one host. Over either, a newer connection
  // evicts the oldest of the host with the most pending (over the second,
  // the newcomer's own host): one host flooding half-open handshakes evicts
  // its own, never a peer from elsewhere.
  uint32_t max_pending_handshakes = 8;
  uint32_t max_pending_per_address = 4;
  std::size_t max_ring_bytes_per_peer = std::size_t{8} << 20;
  std::size_t max_ring_bytes = std::size_t{256} << 20;  // all peers together
  std::size_t max_code_bytes = std::size_t{16} << 20;   // one container as it travels
  std::size_t max_cached_ifuncs = 1024;
  // Their containers, and what confined code commits besides (its globals,
  // zero-initialised ones too, and their initial values): past it, the
  // least recently used go.
  std::size_t max_cached_code_bytes = std::size_t{256} << 20;
  // The same, counted per peer key for the code it loaded: past it, a
  // load is refused with the figure (errc::limit_exceeded).
  std::size_t max_code_bytes_per_key = std::size_t{128} << 20;
  // Confined code that traps this many times for one peer key is refused to
  // that key from then on (by content, on every connection of the key; other
  // keys keep it). 0: never.
  uint32_t max_traps_per_code = 8;
  // A key whose confined code (any code: fresh nonces make new code) traps
  // this often within key_trap_window is refused as a key for key_refusal:
  // its connections close with the reason, new ones are refused. From half
  // as many, it is throttled: a new load at most every key_load_interval.
  // 0: never.
  uint32_t max_traps_per_key = 64;
  std::chrono::milliseconds key_trap_window{60'000};
  std::chrono::milliseconds key_refusal{600'000};
  std::chrono::milliseconds key_load_interval{1'000};
  // A peer that has not proven its key by then is let go (an endpoint that
  // never says HELLO too: send your own Active Messages on a Channel's).
  std::chrono::milliseconds handshake_timeout{2000};
};

struct ReceiverOptions {
  uint16_t port = 0;  // 0: the OS picks one; see Receiver::port()
  // Who may connect and whose code runs. The default refuses every peer: name
  // the keys to accept, or Trust::anyone() for development (docs/security.md).
  Trust trust;
  // This Receiver's own key: it proves itself to sources that ask
  // (ChannelOptions::target_key), and sources' proofs name it, so a proof
  // cannot be relayed to another Receiver. Without one, a Receiver makes a
  // key of its own when it starts (sources cannot pin that one).
  std::optional<KeyPair> identity;
  ReceiverLimits limits;
  uint32_t max_slots = 64;              // per source
  std::size_t max_slot_size = 1 << 20;  // per slot, commit word included
  void* target_args = nullptr;          // third argument of every ifunc's main
  // How large *target_args is: confined code may read (and write) that many
  // bytes of it; with 0 it gets the pointer (null in the window tier) but
  // can touch nothing there.
  // Memory from cache().allocate_exposed (then set_target_args) keeps
  // confined code in the window tier, near native speed; any other
  // target_args with a size sends confined code to the checked tier
  // (ConfinementOptions::window_tier). Set it before peers send code:
  // set_target_args forgets code loaded into windows, which loads again.
  std::size_t target_args_bytes = 0;
  bool target_args_writable = true;
  // Further regions of this process confined code may use (their names are
  // for reports; threechains_lookup finds objects a Node exposed).
  std::vector<ExposedRegion> exposed;
  JitOptions jit;
  // Called for every rejected frame or failed load; the default prints to stderr.
  std::function<void(const Error&)> on_error;
  uint32_t dispatch_burst = 64;  // frames per source per poll before moving on
  // How run(), start()'s thread (and a Node's) spend idle time: spin a
  // little, then sleep until there is work (progress.hpp).
  ProgressOptions progress;
  // Set: GPU ifuncs run on this GPU (gpu.hpp, docs/gpu.md). Off by default.
  // A GPU that cannot be opened is reported (on_error, gpu_info()) and each
  // GPU ifunc is then refused with the reason; CPU ifuncs run as ever. GPU
  // code runs only from signers trusted with native code: it cannot be
  // confined (it reaches all of the GPU's memory).
  std::optional<GpuOptions> gpu;
};

struct ReceiverStats {
  uint64_t frames_dispatched = 0;
  uint64_t frames_rejected = 0;
  uint64_t code_loads = 0;
  uint64_t cache_misses = 0;  // cached frames whose code had to be fetched
  uint64_t peers_connected = 0;
  uint64_t peers_closed = 0;        // all that left, said goodbye or not
  uint64_t peers_lost = 0;          // left without goodbye (endpoint error: crashed, cut off)
  uint64_t peers_refused = 0;       // did not prove a trusted key, or over a limit: no ring
  uint64_t code_refused = 0;        // loads refused: signature, imports, size
  uint64_t code_trapped = 0;        // confined invocations stopped for breaking a rule
  // Frames of window-tier code run several to one way into the window (a
  // run of one ring's frames; the rest of frames_dispatched ran one by one).
  uint64_t frames_in_window_runs = 0;
  uint64_t evictions = 0;           // ifuncs evicted from the cache under its limits
  uint64_t promotions = 0;          // tiered ifuncs switched to code compiled for this CPU
  uint64_t promotion_failures = 0;  // tier-1 compiles or links that failed (tier 0 runs on)
  std::chrono::nanoseconds last_load_time{0};
  std::chrono::nanoseconds total_load_time{0};
  uint64_t sleeps = 0;  // times the serving loop slept, idle (ProgressOptions)
  uint64_t doorbells = 0;  // frames that found their ring cold (unpolled) and woke it
  int last_load_tier = -1;  // LoadResult::tier of the last load (-1: none yet)
};

// What one ifunc (one code id) did at this Receiver: Receiver::ifunc_stats().
struct IfuncStats {
  CodeId code = 0;
  std::string name;              // "" for code refused before it was read
  bool loaded = false;           // in the cache now (stats outlive an eviction)
  // Loaded confined in the window tier (ConfinementOptions::window_tier);
  // false for the checked tier, unconfined code, or code not loaded now.
  bool in_window = false;
  uint64_t calls = 0;            // invocations, trapped ones included
  uint64_t payload_bytes = 0;    // what those calls were given
  uint64_t refusals = 0;         // loads of it refused: trust, signature, imports, limits
  uint64_t traps = 0;            // confined invocations stopped for breaking a rule
  // Time inside the ifunc, measured on a sample of calls (its first, then one
  // call in 1024 of all: two clock reads each), so that counting costs the
  // others nothing but a few adds.
  uint64_t timed_calls = 0;
  std::chrono::nanoseconds timed{0};
  [[nodiscard]] std::chrono::nanoseconds mean_time() const noexcept {
    return timed_calls == 0 ? std::chrono::nanoseconds{0}
                            : timed / static_cast<int64_t>(timed_calls);
  }
};

class Receiver {
 public:
  // Listens on options.port. Throws errc::invalid_argument if the Worker
  // already has a Receiver (or a Node).
  explicit Receiver(Worker worker, ReceiverOptions options = {});
  Receiver(Receiver&& other) noexcept;
  // Stops the Receiver it replaces first.
  Receiver& operator=(Receiver&& other) noexcept;
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;
  // Stops listening and lets every peer go, without waiting for them.
  ~Receiver();

  [[nodiscard]] uint16_t port() const noexcept;

  // Non-blocking: progresses the worker once and dispatches what is committed.
  // Returns the number of frames dispatched.
  unsigned poll();

  // Polls until `stop()` holds. Yields the CPU after a run of empty polls, so a
  // spinning Receiver does not starve its peers on an oversubscribed machine,
  // and sleeps once they lasted ReceiverOptions::progress.spin (wait()).
  template <class StopCondition>
  void run(StopCondition&& stop) {
    detail::serve_until([this] { return serve_round(); },
                        [this](std::chrono::milliseconds limit) { (void)wait(limit); }, stop,
                        progress_options(), 1024);
  }

  // Sleeps until there may be work — a message, a connection, a frame a
  // source stored into its ring, wake() — or `limit` (1 ms to 1 h) passed.
  // What run() does when idle, for loops of your own around poll(): call
  // poll() after it either way. True if something woke it or is due; false
  // if the time ran out (or the sleep was interrupted: a hint, not a promise).
  bool wait(std::chrono::milliseconds limit);
  // Ends a wait() now (run()'s, or the progress thread's sleep); any thread.
  void wake() noexcept;

  // Serves on a progress thread of its own (the research prototype's daemon);
  // ifuncs then run on that thread. While it runs, the Worker is that thread's:
  // poll(), and Channels or Sources on the same Worker, throw
  // errc::invalid_argument until stop() (a Channel dropped meanwhile says its
  // goodbye through the thread). An exception on the thread goes to on_error.
  // Throws errc::invalid_argument if it runs already, or if this Receiver is
  // a Node's (use Node::start).
  void start();
  // Joins the progress thread (it stops at its next poll); safe if none runs.
  // The destructor calls it.
  void stop() noexcept;

  // cache() and set_target_args() throw errc::invalid_argument while the
  // progress thread runs; read stats() after stop() (the thread writes them).
  [[nodiscard]] JitCache& cache();
  [[nodiscard]] const ReceiverStats& stats() const noexcept;
  // Per ifunc, most called first: code loaded now or since (up to 1024
  // entries beyond what is loaded), and code refused. Throws
  // errc::invalid_argument while the progress thread runs (it writes them).
  [[nodiscard]] std::vector<IfuncStats> ifunc_stats() const;
  // Sources connected now.
  [[nodiscard]] std::size_t peers() const noexcept;
  // `bytes`: how much of *args confined code may use (0: none of it).
  void set_target_args(void* args, std::size_t bytes = 0);
  [[nodiscard]] void* target_args() const noexcept;

  // The GPU (ReceiverOptions::gpu): what it is, or why it is not there.
  // Throws errc::invalid_argument while the progress thread runs.
  [[nodiscard]] GpuInfo gpu_info() const;
  // Device memory GPU ifuncs see in their region table, in the order
  // exposed (the GPU analogue of target_args): memory the application
  // allocated in the device's primary context (cudaMalloc, cuMemAlloc; the
  // GPU worker opens it through CUDA IPC, so not cudaMallocAsync pools).
  // It survives a kernel fault (the worker's context faults, not this
  // process's). Throw errc::gpu_failed without a GPU, and
  // errc::invalid_argument while the progress thread runs.
  void expose_device(const std::string& name, void* device_address, std::size_t bytes);
  // Allocates device memory owned by this Receiver and exposes it; its device
  // address. For applications that use no CUDA of their own.
  [[nodiscard]] void* allocate_device(const std::string& name, std::size_t bytes);
  void copy_to_device(void* device_address, const void* host, std::size_t bytes);
  void copy_from_device(void* host, const void* device_address, std::size_t bytes);
  [[nodiscard]] const Worker& worker() const noexcept;

 private:
  friend struct detail::NodeCore;
  [[nodiscard]] const ProgressOptions& progress_options() const noexcept;
  unsigned serve_round();  // poll(), counting the worker's events as work too
  explicit Receiver(std::shared_ptr<detail::Engine> engine) noexcept;
  void release() noexcept;
  std::shared_ptr<detail::Engine> engine_;
};

}  // namespace threechains
