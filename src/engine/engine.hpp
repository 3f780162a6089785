// Engine: the compiled core of one Worker. It registers the Active Message
// handlers once, owns the table of Links (one per remote process, keyed by
// endpoint), answers the protocol's control messages outside UCX's handlers,
// and — when a Receiver exists on the Worker — listens, grants rings, and
// dispatches frames into the JIT cache.
//
// Who owns what:
//
//   Source, Channel, Receiver, Node ──shared_ptr──▶ Engine ──owns──▶ Worker
//   Channel ──shared_ptr──▶ Link ◀──shared_ptr── Engine::links_ (while connected)
//                                ◀──shared_ptr── Engine::closing_ (while its endpoint closes)
//   Engine ──owns──▶ Target (Receiver role: listener, JIT cache, stats), Outbox,
//                    Admission (accepted connections until they prove a key)
//
// A Link leaves the table when its peer goes away or both directions are
// done; a Channel that still holds it sees the failure at its next blocking
// call. No object points into another's state by raw pointer: AM handlers get
// the Engine (which outlives its registration) and find Links by endpoint.
#pragma once

#include "engine/admission.hpp"
#include "engine/link.hpp"
#include "engine/outbox.hpp"
#include "runtime/hooks.hpp"
#include "trust/sodium.hpp"

#include <threechains/channel.hpp>
#include <threechains/jit_cache.hpp>
#include <threechains/receiver.hpp>
#include <threechains/ucx/listener.hpp>
#include <threechains/ucx/worker.hpp>

#include <pthread.h>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace threechains::gpu {
class Service;
}

namespace threechains::detail {

// What the engine is running right now (valid inside an ifunc's main).
struct DispatchContext {
  CodeId code_id = 0;
  int64_t origin_rank = -1;  // rank of the source that sent the frame, -1 if not in a mesh
  const char* peer = nullptr;  // who sent it (a Link's peer_name), for fault reports
  uint64_t caller = 0;  // whose key it runs for (KeyRecord::serial; 0: this process)
};

class CodeVetting;  // code_vetting.hpp

// The Receiver role of an engine.
struct Target {
  Target(const Worker& worker, ReceiverOptions receiver_options, Listener::OnConnect on_connect);
  ~Target();
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;
  // Hands the JitCache the regions options name for confined code.
  void expose_regions();

  // Code this process loaded, kept (by a Node) so injected code can send it onward.
  struct StoredCode {
    std::vector<std::byte> container;  // moved into `ifunc` the first time it is needed
    std::optional<Ifunc> ifunc;
    Confine confine = Confine::yes;  // how it runs here: loaded again, it runs so again
  };

  ReceiverOptions options;
  // ReceiverOptions::gpu: the GPU executor (null without one, or if it could
  // not be opened: gpu_unavailable says why). It owns the kernels that
  // CachedIfunc::gpu entries of `cache` point to; Engine::forget evicts both.
  std::unique_ptr<gpu::Service> gpu;
  std::string gpu_unavailable;
  std::optional<Error> gpu_error;  // the last GPU failure, for trap_error
  JitCache cache;
  ReceiverStats stats;
  DispatchContext running;
  // The thread that polls (and so runs ifuncs), set once a poll, not once a
  // frame: what fault_report.cpp tells Targets apart by.
  pthread_t serving_thread{};
  std::unordered_map<CodeId, StoredCode> code_store;
  std::unordered_map<std::string, CodeId> code_by_name;  // the latest code of each name
  std::vector<ucp_conn_request_h> pending_connections;
  // The cache under ReceiverLimits: bytes of each loaded ifunc's container and
  // when it last ran (a clock ticked when the dispatched ifunc changes, so a
  // run of one ifunc costs one compare), for least-recently-used eviction.
  struct CacheUse {
    std::size_t bytes = 0;
    uint64_t last_use = 0;
    std::shared_ptr<KeyRecord> charged;  // the key that loaded it, charged `bytes`
  };
  std::unordered_map<CodeId, CacheUse> cache_use;
  // Confined code compiling in a worker process (JitCache::start_load): the
  // frame that brought it waits in its slot (or backlog), as for a cache
  // miss, while every other peer is served; Engine::finish_compiles takes
  // it from there.
  struct Compiling {
    ContentDigest digest{};
    std::shared_ptr<KeyRecord> key;  // one compile per key at a time
    std::weak_ptr<Link> link;        // the connection it came on
    std::size_t code_bytes = 0;      // its container's size, charged to the key
    std::vector<std::byte> container;  // kept (by a Node) to send onward; else empty
  };
  std::unordered_map<CodeId, Compiling> compiling;
  // Large code whose digest and signature are checked on `vetting` (made
  // with the first), by the check's serial: its frame waits as for a
  // compile, and so does every other load of its key (one at a time), but
  // no other key's: unchecked bytes hold no code identity.
  // Engine::finish_vetting goes on from there.
  struct Vetting {
    std::shared_ptr<KeyRecord> key;
    std::weak_ptr<Link> link;  // the connection it came on
    CodeId id = 0;
    CodecId codec = CodecId::bitcode;
    std::size_t bytes = 0;
  };
  std::unordered_map<uint64_t, Vetting> vetting_waits;
  std::unique_ptr<CodeVetting> vetting;
  std::size_t vetting_bytes = 0;  // of the code in vetting_waits
  uint64_t next_vet_serial = 1;
  // What each ifunc loaded from the network is, by content: a peer naming an
  // identity it has not shown us must send the code, and runs it only if it
  // is the same code (Inbound::shown).
  std::unordered_map<CodeId, ContentDigest> digests;
  std::unordered_map<CodeId, std::string> names;  // of what is loaded, for fault reports
  KeyBook keys;  // what each peer key's confined code did, across its connections
  // Receiver::ifunc_stats(); the record of the ifunc that ran last is kept at
  // hand, so a run of one ifunc costs one compare to find it (node-based map:
  // the pointer stays valid until its entry is erased, which resets it).
  struct IfuncRecord {
    IfuncStats stats;
    uint64_t last_used = 0;  // use_clock when it last became the one counted
  };
  std::unordered_map<CodeId, IfuncRecord> ifunc_stats;
  // The record of the ifunc that ran last, and what its calls added since it
  // became so: counted here, on this struct's own lines, and added to the
  // record when another ifunc runs (or the statistics are read), so a run of
  // one ifunc touches no other memory. One call in 1024 is timed
  // (sample_tick), and the first call of each ifunc.
  CodeId counted_id = 0;
  IfuncStats* counted = nullptr;
  uint64_t counted_calls = 0;
  uint64_t counted_bytes = 0;
  uint32_t sample_tick = 0;

  std::size_t cached_code_bytes = 0;
  uint64_t use_clock = 0;
  CodeId last_dispatched = 0;
  struct alignas(16) ScratchBlock {
    std::byte bytes[16];
  };
  std::vector<ScratchBlock> scratch;  // AM delivery: realigned frames
  // run_window_frames': the payloads of a run, kept here so that no run
  // zeroes an array of them on the stack first (1 KiB `rep stos` a run).
  // Valid during one run_window_frames call only (they point into the
  // ring); each run writes what it reads.
  std::array<IfuncPayload, 32> window_run{};
  Listener listener;  // last: destroyed first, so no connection arrives mid-teardown
};

class Engine {
 public:
  explicit Engine(Worker worker);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // Closes every endpoint (bounded wait) and cancels what is in flight.
  ~Engine();

  // The engine of `worker`, created on first use; every handle on one Worker shares it.
  [[nodiscard]] static std::shared_ptr<Engine> of(const Worker& worker);

  [[nodiscard]] const Worker& worker() const noexcept { return worker_; }

  // One round: UCX progress, then the control work handlers left for later
  // (connections, rings to grant, code to load, goodbyes, lost peers, cache
  // misses to answer), then finished requests are freed.
  unsigned progress();

  // ---- source role ---------------------------------------------------------
  // Connects to host:port and opens a ring there. `while_waiting` runs on
  // every round of the wait (a Node serves its own frames there).
  [[nodiscard]] std::shared_ptr<Link> connect(const std::string& host, uint16_t port,
                                              const ChannelOptions& options, int64_t my_rank,
                                              const std::function<void()>& while_waiting);
  // Connects to every target at once, at most `in_flight_per_target`
  // handshakes to one target at a time; the links in the order of `targets`.
  // All or nothing: on the first failure the others are let go and it throws.
  [[nodiscard]] std::vector<std::shared_ptr<Link>> connect_all(
      std::span<const ReceiverAddress> targets, const ChannelOptions& options,
      std::size_t in_flight_per_target, int64_t my_rank = -1,
      const std::function<void()>& while_waiting = {});
  // Opens our sending direction on a link the peer opened (a Node pair).
  void open_outbound(Link& link, const ChannelOptions& options, int64_t my_rank,
                     const std::function<void()>& while_waiting);
  // Closes the sending direction: a goodbye, queued, never waited for. From
  // another thread while the progress thread runs, the thread says it.
  void say_goodbye(const std::shared_ptr<Link>& link) noexcept;
  // Throws if the link can no longer carry frames (peer gone, closed, timed out).
  void check_sendable(const Link& link, const char* operation) const;
  // Throws the first code refusal the target sent on `link` (and forgets it).
  void throw_code_refusal(Link& link, const char* operation);
  [[nodiscard]] bool closing(const Link& link) const noexcept;

  // ---- target role ---------------------------------------------------------
  void start_target(ReceiverOptions options);
  void stop_target() noexcept;
  [[nodiscard]] bool has_target() const noexcept { return target_ != nullptr; }
  [[nodiscard]] Target& target() noexcept { return *target_; }
  [[nodiscard]] const Target& target() const noexcept { return *target_; }
  // What confined code may use changed (target_args, a Node's exposed
  // regions): exposed anew, and code loaded into windows is forgotten, to
  // load again for the tier that reaches what is exposed now (window code
  // would get null where it is handed memory outside every window, and its
  // traps would count against an honest key). Not while the thread serves.
  void expose_anew();
  // progress(), then every inbound ring drained, then credits returned.
  unsigned poll();
  // progress() and ring draining, without returning credits (a Node returns
  // them after its queued sends, which may carry them).
  unsigned poll_without_credits();
  // may_defer: over AM delivery, a credit for frames that arrived since the
  // last call waits one call (a reply may carry it); now: sent at once, for a
  // loop that waits on something else (a flush) and polls no more.
  enum class CreditTiming { may_defer, now };
  void return_credits(CreditTiming timing = CreditTiming::may_defer);
  // Tier-1 compiles whose call count was reached start here, after credits.
  void start_due_compiles();
  // Loads `ifunc` into the cache (and the code store) if it is not there:
  // the application's own code runs as it is; code a peer sent runs as its
  // signer's trust said when it came (a queued send of it reloads it so).
  void install(const Ifunc& ifunc, Confine confine = Confine::no);
  // How kept code runs here (Confine::yes if it is not kept: the safe guess).
  [[nodiscard]] Confine confinement_of(CodeId id) const;
  // A kept ifunc by identity or by name; nullptr if none.
  [[nodiscard]] const Ifunc* stored(CodeId id);
  [[nodiscard]] const Ifunc* stored(const std::string& name);
  // Runs `entry` as the dispatch of `id` from `origin` (the runtime sees it).
  // Runs a cached ifunc as the frame of `origin`; a trap if confined code broke a rule.
  std::optional<ConfinedTrap> run_entry(const CachedIfunc& ifunc, CodeId id, int64_t origin,
                                        const char* peer, void* payload, std::size_t size,
                                        uint64_t caller);
  std::optional<ConfinedTrap> run_gpu(const CachedIfunc& ifunc, void* payload, std::size_t size);
  LoadResult load_with_gpu(CodeId id, CodecId codec, std::span<const std::byte> code,
                           Confine confine);
  // What a trap says. `Audience::source` (what travels back over the
  // network) names the reason only: the faulting address can be another
  // peer's data that the code loaded and then used as a pointer.
  enum class Audience { log, source };
  [[nodiscard]] Error trap_error(const CachedIfunc& ifunc, CodeId id, const ConfinedTrap& trap,
                                 const std::string& peer, Audience audience = Audience::log) const;
  // Counts a trap of `id` against the link's key; at
  // ReceiverLimits::max_traps_per_code its content is refused to that key,
  // at max_traps_per_key the key itself (every connection of it closes).
  void count_trap(Link& link, CodeId id, const std::string& name);
  // Why `key` is refused now, or nullopt.
  [[nodiscard]] std::optional<std::string> key_refused(const KeyRecord& key) const;
  // Why a new load for `key` must wait (it is throttled), or nullopt.
  [[nodiscard]] std::optional<std::string> key_throttled(KeyRecord& key) const;
  // The per-ifunc record of `id`, made if there is none; it becomes the one
  // counted (what the one before had pending is added to it first).
  IfuncStats& ifunc_record(CodeId id);
  void report(const Error& error);
  [[nodiscard]] std::size_t receiving_links() const noexcept { return inbound_.size(); }

  // ---- idle (idle.cpp) ---------------------------------------------------------
  // Blocks until a message, a connection, a frame stored into a ring or
  // wake() may have brought work, or `limit` passed (shorter while something
  // waits on a clock). True if something woke it.
  bool sleep_until_work(std::chrono::milliseconds limit);
  // Ends a sleep_until_work() now, from any thread.
  void wake() noexcept;
  // UCX events the last progress() handled: a loop whose polls dispatch no
  // frame but serve the worker (GETs emulated over tcp, the application's
  // own Active Messages) is not idle.
  [[nodiscard]] unsigned last_events() const noexcept { return last_events_; }

  // ---- background progress ---------------------------------------------------
  // Runs `poll` on a thread of its own until stop_thread(); ifuncs then run on
  // that thread. Throws errc::invalid_argument if one is running already.
  // Idle, it yields every `yield_after` empty polls and sleeps by `sleep`
  // as `progress` says; stop_thread() wakes it.
  void start_thread(std::function<unsigned()> poll,
                    std::function<void(std::chrono::milliseconds)> sleep,
                    const ProgressOptions& progress, unsigned yield_after);
  // Joins the thread (it stops at its next poll). Safe when none runs.
  void stop_thread() noexcept;
  // Throws errc::invalid_argument naming `call` while the thread owns the worker
  // (unless `call` comes from that thread itself, e.g. from an ifunc).
  void check_not_threaded(const char* call) const;
  [[nodiscard]] bool serves_as_node() const noexcept { return runtime_hooks_ != nullptr; }

  // ---- Node ----------------------------------------------------------------
  // Keep loaded code so injected code can send it onward; the runtime to expose.
  void serve_as_node(const RuntimeHooks* hooks, bool defer_credits) noexcept {
    runtime_hooks_ = hooks;
    keep_code_ = true;
    defer_credits_ = defer_credits;
  }
  // The link to `rank` whose inbound direction is open (the peer connected here).
  [[nodiscard]] std::shared_ptr<Link> inbound_link_of_rank(int64_t rank) const;

 private:
  using Handler = ucs_status_t (*)(void*, const void*, std::size_t, void*, std::size_t,
                                   const ucp_am_recv_param_t*);
  // The Link (proven peer, or one we opened) or the Candidate (accepted, not
  // yet proven: only HELLO, PROOF and BYE look for those) behind an AM.
  Link* find(const ucp_am_recv_param_t* param) const noexcept;
  Candidate* candidate(const ucp_am_recv_param_t* param) const noexcept;
  void handle_control();
  void serve_code_requests();  // the target's cache misses, answered from progress()
  void admit();  // the listener's connections through Admission; the proven become Links
  // The handshake (handshake.cpp; the target's side of it is admission.cpp).
  Hello make_hello(Outbound& out, const ChannelOptions& options, std::size_t slot_size,
                   int64_t my_rank);
  void answer_challenge(Link& link);
  void answer_handshake(Link& link);  // a HELLO on a link we opened (a Node's peer)
  void grant_ring(Link& link, const Hello& hello, std::span<const std::byte> credit_rkey);
  void send_welcome(Link& link, ucs_status_t status, const std::string& reason);
  void refuse_peer(Link& link, const std::string& reason);
  void expire_refused();
  void send_code_refusal(Link& link, CodeId id, const Error& error);
  void accept_code(Link& link, Inbound::CodeArrival& arrival);
  void skip_stalled(Link& link);
  void close_inbound(Link& link, bool lost) noexcept;
  void retire(std::shared_ptr<Link> link) noexcept;
  void reap_closing() noexcept;
  void refresh_inbound();
  // The endpoint and the HELLO; the WELCOME comes later (settled()).
  [[nodiscard]] std::shared_ptr<Link> begin_connect(const std::string& host, uint16_t port,
                                                    const ChannelOptions& options, int64_t my_rank);
  void start_outbound(Link& link, const ChannelOptions& options, int64_t my_rank);
  void wait_for_welcome(Link& link, const std::string& what, const ChannelOptions& options,
                        const std::function<void()>& while_waiting);
  // After a failure in connect_all: progresses until every link still
  // connecting has an answer, an error or its deadline (UCX 1.13 crashes
  // closing an endpoint its connection manager is still connecting), then
  // says goodbye on the open ones and lets all go. Never throws.
  void abandon_connects(std::span<const std::shared_ptr<Link>> links,
                        std::span<const std::chrono::steady_clock::time_point> deadlines,
                        const std::vector<bool>& finished, const ChannelOptions& options) noexcept;
  // Whether the Receiver answered the HELLO with a ring; throws its refusal,
  // a lost peer, or the deadline passed. Progresses nothing itself (but in
  // the short grace for a refusal that may follow a reset).
  [[nodiscard]] bool settled(Link& link, const std::string& what, const ChannelOptions& options,
                             std::chrono::steady_clock::time_point deadline);
  // What a granted ring needs on this side before the first frame.
  void finish_outbound(Link& link, const ChannelOptions& options);
  Delivery resolve_delivery(Delivery wanted, const Link& link) const;

  [[nodiscard]] bool has_timed_work() const noexcept;
  // Makes the rings in cooling_ cold (idle.cpp); false if one of them holds
  // a frame (it stays hot) or no fence exists here (all stay hot).
  bool cool(uint64_t generation);
  void cool_idle_rings();  // every few milliseconds: rings idle since the last pass
  uint64_t next_generation() noexcept;
  void rebuild_polled() noexcept;
  void owe_credit(Link& link) noexcept {
    if (link.in.credit_due) return;
    link.in.credit_due = true;
    credit_due_.push_back(&link);  // capacity: inbound_.size() (refresh_inbound)
  }

  unsigned drain(Link& link);
  bool dispatch(Link& link, std::byte* frame, std::size_t available);
  // A run of a ring's frames that name the code that ran last (dispatch):
  // start_run looks at the frame that may begin one (`entry` null: none);
  // run_next runs one more frame of it with what dispatch settled once
  // (false: the frame does not qualify, dispatch() it; a trap comes back in
  // `trap`, for drain to answer once the run's context is put back).
  // A CodeRun lives in one drain() call only: `entry` points into the
  // JitCache's entries and `context.peer` into the Link, and drain drops the
  // run after anything that may load, evict, refuse or close (dispatch(), a
  // trap), so neither outlives what it points into.
  struct CodeRun {
    const CachedIfunc* entry = nullptr;
    CodeId id = 0;
    uint64_t first = 0;      // the header's first word, its sequence 0 (FrameHeader::first_word)
    uint64_t max_sizes = 0;  // the largest payload a slot holds: its sizes' word, code_size 0
    DispatchContext context;  // what the runtime and fault reports see while it runs
    // Its entry point, where it is called as it is: native code on a plain
    // Receiver (no confinement runner, no Node runtime to switch to).
    IfuncMain direct = nullptr;
    // Confined code in the window tier: the run's frames that are already
    // committed are run together (run_window_frames).
    bool windowed = false;
  };
  [[nodiscard]] CodeRun start_run(Link& link, const std::byte* frame,
                                  std::size_t available) noexcept;
  [[nodiscard]] bool run_next(Link& link, const CodeRun& run, std::byte* frame,
                              std::optional<ConfinedTrap>& trap);
  // The window tier's run_next: this frame (at `index`, committed) and the
  // committed ones after it that qualify, at most `most`, copied into the
  // code's window and run with one way in (JitCache::invoke_each). Returns
  // how many frames it consumed, the last the trapped one if `trap` is set;
  // 0 if this frame does not qualify (dispatch() it).
  [[nodiscard]] uint32_t run_window_frames(Link& link, const CodeRun& run, uint64_t index,
                                           uint32_t most, std::optional<ConfinedTrap>& trap);
  // Whether `frame`, due as number `sequence`, continues `run` (its header
  // as the run's first had it, a payload within the slot, no code) and is
  // not the one call in 1024 that run_entry times (`tick`: calls counted
  // before it); its payload's size in `payload_size`. run_next's and
  // run_window_frames' one check: a check added here holds for both.
  [[nodiscard]] static bool continues_run(const CodeRun& run, const std::byte* frame,
                                          uint64_t sequence, uint64_t tick,
                                          uint32_t& payload_size) noexcept;
  // A confined (or GPU) ifunc's trap: reported here, told to the source,
  // counted against the code and its key.
  void answer_trap(Link& link, const CachedIfunc& entry, CodeId id, const ConfinedTrap& trap);
  void dispatch_delivered(Link& link, uint64_t sequence, std::byte* data, std::size_t length);
  void ring_inconsistent(Link& link, std::string what);
  void drain_backlog(Link& link);
  // Checks (size, signature) and loads code that arrived from `link`; a
  // refusal is reported, and told to the source. `entry` null and
  // `compiling` false: it cannot run; `compiling`: confined code compiling
  // in a worker (or waiting for its key's compile), its frame waits.
  struct Loaded {
    const CachedIfunc* entry = nullptr;
    bool compiling = false;
  };
  // `owned`: if set, holds exactly `code`, private to this process (a code
  // delivery's bytes): moved from instead of copied.
  Loaded load(Link& link, CodeId id, CodecId codec, std::span<const std::byte> code,
              std::vector<std::byte>* owned = nullptr);
  // Code whose digest (and, where `confine` is set, signature) was checked:
  // the checks by content, the key's limits and the load itself.
  struct VettedCode {
    std::vector<std::byte> code;
    ContentDigest digest{};
    std::optional<Confine> confine;  // unset: the signature is checked here
    std::optional<Error> refused;    // the signature check's refusal, made aside
  };
  Loaded load_vetted(Link& link, CodeId id, CodecId codec, VettedCode vetted);
  // What the content's digest settles before any signature is checked: the
  // code banned to this key, or its identity taken by other code (thrown,
  // errc::code_refused), or loaded already (its entry). Nullopt: go on.
  std::optional<Loaded> answered_by_content(Link& link, CodeId id, const ContentDigest& digest);
  // Code to CodeVetting; its frame waits as for a compile.
  void vet_aside(Link& link, CodeId id, CodecId codec, std::vector<std::byte> code);
  // Takes the checks that finished on to their loads, and wakes the frames.
  void finish_vetting();
  // After a load that finished aside (vetted or compiled): the frames that
  // waited for it, or for `key`'s turn, look again; `source`'s own is
  // dropped if the code did not load (none is, if `source` is null).
  void wake_waiting(CodeId id, const Link* source, bool loaded, const KeyRecord* key);
  // What a load that worked makes known: its digest and name, the key it is
  // charged to (errc::limit_exceeded over ReceiverLimits::max_code_bytes_per_key).
  const CachedIfunc* admit_loaded(const std::shared_ptr<KeyRecord>& charged, CodeId id,
                                  const ContentDigest& digest,
                                  const LoadResult& result, std::size_t code_bytes,
                                  std::vector<std::byte> kept_container, Confine confine);
  // Refuses a load: reported, counted, told to the source over `link`.
  void refuse_load(Link* link, CodeId id, const Error& error);
  // Links confined code whose compile finished, and wakes the frames that waited for it.
  void finish_compiles();
  bool drop_abandoned_compiles();
  // A key's trap (or crashed compile) within ReceiverLimits::key_trap_window;
  // at max_traps_per_key the key is refused and its connections close.
  void count_key_trap(KeyRecord& key);
  // GPU images cannot be confined: errc::code_refused if `code` carries one.
  static void refuse_confined_gpu(std::span<const std::byte> code);
  void count_load(const LoadResult& result) noexcept;  // the stats of a load that worked
  void note_loaded(CodeId id, std::size_t bytes);
  void touch(CodeId id) noexcept;
  // Evicts least recently used ifuncs (never `keep`) until the cache fits its limits.
  void trim_cache(CodeId keep);
  void forget(CodeId id);
  bool request_code(Link& link, const FrameView& frame);
  void return_credit(Link& link);
  void promote_tiers();
  std::byte* aligned_scratch(std::size_t length);

  static ucs_status_t on_hello(void*, const void*, std::size_t, void*, std::size_t,
                               const ucp_am_recv_param_t*);
  static ucs_status_t on_welcome(void*, const void*, std::size_t, void*, std::size_t,
                                 const ucp_am_recv_param_t*);
  static ucs_status_t on_need_code(void*, const void*, std::size_t, void*, std::size_t,
                                   const ucp_am_recv_param_t*);
  static ucs_status_t on_code(void*, const void*, std::size_t, void*, std::size_t,
                              const ucp_am_recv_param_t*);
  static ucs_status_t on_credit(void*, const void*, std::size_t, void*, std::size_t,
                                const ucp_am_recv_param_t*);
  static ucs_status_t on_frame(void*, const void*, std::size_t, void*, std::size_t,
                               const ucp_am_recv_param_t*);
  static ucs_status_t on_challenge(void*, const void*, std::size_t, void*, std::size_t,
                                   const ucp_am_recv_param_t*);
  static ucs_status_t on_proof(void*, const void*, std::size_t, void*, std::size_t,
                               const ucp_am_recv_param_t*);
  static ucs_status_t on_code_refused(void*, const void*, std::size_t, void*, std::size_t,
                                      const ucp_am_recv_param_t*);
  static ucs_status_t on_doorbell(void*, const void*, std::size_t, void*, std::size_t,
                                  const ucp_am_recv_param_t*);
  static ucs_status_t on_bye(void*, const void*, std::size_t, void*, std::size_t,
                             const ucp_am_recv_param_t*);

  struct Closing {
    std::shared_ptr<Link> link;
    Request close;
  };

  Worker worker_;
  Outbox outbox_;
  Admission admission_{worker_, outbox_};  // after both: it sends through them
  std::unordered_map<ucp_ep_h, std::shared_ptr<Link>> links_;  // proven peers and our own
  std::vector<Link*> inbound_;  // links_ entries whose inbound ring is open
  // Of those, what each poll looks at: rings stored into directly and hot
  // (frames by AM run from their handler; cold rings wake by doorbell), and
  // the links that owe their source a credit. Both only hold links of
  // inbound_, are rebuilt with it, and have its capacity: no allocation in a poll.
  std::vector<Link*> polled_;
  std::vector<Link*> credit_due_;
  std::vector<Link*> cooling_;  // scratch of a cooling pass
  bool rewarm_pending_ = false;  // a doorbell made a cold ring hot: rebuild polled_
  uint32_t polls_ = 0;
  std::chrono::steady_clock::time_point last_cooling_{};
  std::vector<Closing> closing_;
  std::size_t ring_bytes_granted_ = 0;  // rings of all inbound links (ReceiverLimits)
  bool control_pending_ = false;
  bool code_requests_pending_ = false;
  uint32_t rounds_ = 0;
  uint64_t failures_seen_ = 0;  // Endpoint::failures() at the last look
  bool keep_code_ = false;
  const RuntimeHooks* runtime_hooks_ = nullptr;
  bool defer_credits_ = false;  // NodeOptions::defer_credits
  std::unique_ptr<Target> target_;
  int event_fd_ = -1;  // UCX's, taken on the first sleep
  uint64_t sleep_generation_ = 0;
  unsigned last_events_ = 0;
  [[nodiscard]] bool on_other_thread() const noexcept {
    return threaded_.load(std::memory_order_acquire) &&
           std::this_thread::get_id() != thread_id_.load(std::memory_order_acquire);
  }
  void say_goodbye_here(Link& link) noexcept;
  void take_deferred_goodbyes() noexcept;

  std::atomic<bool> threaded_{false};  // a progress thread owns the worker
  // That thread's id, stored by the thread itself before its first poll (the
  // jthread object may not be assigned yet when it starts running).
  std::atomic<std::thread::id> thread_id_{};
  // Channels dropped on another thread while the progress thread runs: their
  // goodbyes are said by the thread (the one hand-off between threads).
  std::mutex goodbyes_mutex_;
  std::vector<std::shared_ptr<Link>> deferred_goodbyes_;
  std::atomic<bool> goodbyes_pending_{false};
  std::jthread thread_;  // last: joined first when the engine goes
};

}  // namespace threechains::detail
