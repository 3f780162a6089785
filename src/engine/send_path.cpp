// The out-of-line halves of Channel's send path, and the Channel and Source
// handles. Only building a frame in its slot and the commit store are inline
// (channel.hpp); a UCX call per frame is made here anyway.
#include "engine/engine.hpp"

#include <threechains/channel.hpp>

#include <sched.h>

#include <array>
#include <cstring>
#include <utility>

namespace threechains {
namespace {

// Credit checks before a round of progress, where credits land without one
// (shared memory, RDMA puts). 128 pauses measured best here (32: -10 % shm
// 8-byte rate, 512: no better); over tcp credits come by Active Message, so
// only progress brings them.
constexpr int kCreditSpins = 128;

// A source that has waited this long for the target yields its core on
// every round after: the scheduler may have woken the target on this core
// (a wake-up after a sleep is placed beside its waker), and a waiter that
// only spins keeps it off until the next tick (~4 ms here: every cached
// round trip after a 20 ms pause took that long; threechains-bench-idle
// --gap-ms 20, docs/performance.md). Longer than any hot round trip: a
// waiter that yields sooner hands its core to any CPU hog beside it for a
// whole time slice (tcp with one hog: 5 us gave 1.2-2.0x UCX AM's latency,
// 50 us 0.7-1.4x). After ringing a sleeping target's doorbell we know it is
// waking, and yield at once (OutboundRing::woke_target).
constexpr std::chrono::microseconds kYieldAfter{50};

// How many credit checks a waiting source makes before each round of UCX
// progress: many where credits land without progress, one over AM.
int spins_before_progress(const detail::Outbound& out) noexcept {
  return out.delivery == Delivery::active_message ? 1 : kCreditSpins;
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

namespace detail {

std::byte* staging_slot(Engine& engine, Link& link, std::size_t slot) {
  engine.check_not_threaded("Channel::send");
  engine.check_sendable(link, "send");  // a retired link's endpoint is gone: no UCX call on it
  Outbound& out = *link.out;
  Request* requests = &out.in_flight[slot * 2];
  const auto deadline = std::chrono::steady_clock::now() + out.timeout;
  // A staging slot is reused only once UCX has let go of its previous frame.
  for (int i = 0; i < 2; ++i) {
    ucs_status_t status;
    while ((status = requests[i].reap()) == UCS_INPROGRESS) {
      engine.progress();
      engine.check_sendable(link, "send");
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(errc::timeout, "channel to " + link.peer_name +
                                       ": send: UCX did not finish the previous frame in slot " +
                                       std::to_string(slot));
      }
    }
    if (status != UCS_OK) [[unlikely]]
      throw Error(status, "channel to " + link.peer_name + ": an earlier frame failed");
  }
  return out.staging->data() + slot * out.hot.slot_size;
}

namespace {

// Beyond ChannelOptions::max_code_kept: let go of code whose every frame the
// target has consumed (it can no longer ask for it for those frames), and
// forget that the target holds it, so its next send carries the code again.
void let_go_of_consumed_code(Outbound& out, std::size_t keep) {
  const uint64_t consumed = out.hot.consumed();
  for (auto it = out.sent.begin(); it != out.sent.end() && out.sent.size() > keep;) {
    if (it->second.last_sequence <= consumed && it->first != out.current_code) {
      out.held.erase(it->first);
      it = out.sent.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

bool prepare_code(Link& link, const Ifunc& ifunc, std::size_t payload_size) {
  Outbound& out = *link.out;
  // The ifunc we switch away from was last sent in the frame before this one
  // (tracked apart from last_held, which a refusal or forget_held_code clears).
  if (out.current_code != 0) {
    const auto previous = out.sent.find(out.current_code);
    if (previous != out.sent.end()) previous->second.last_sequence = out.hot.next_sequence - 1;
  }
  out.current_code = ifunc.id();
  out.hot.last_held = ifunc.id();
  out.hot.last_held_valid = true;
  if (out.sent.size() > out.max_code_kept) let_go_of_consumed_code(out, out.max_code_kept);
  if (out.held.contains(ifunc.id())) return false;
  if (out.sent.size() >= out.max_code_kept) let_go_of_consumed_code(out, out.max_code_kept - 1);
  out.sent.insert_or_assign(ifunc.id(), Outbound::KeptCode{ifunc, out.hot.next_sequence});
  out.held.insert(ifunc.id());
  out.code_unconfirmed = true;
  // Too big to travel with its code: send it cached; the target's miss fetches
  // the code by AM, and the payload still runs exactly once.
  return frame_size(payload_size, ifunc.code().size()) <= out.hot.capacity();
}

namespace {

// AM delivery: the header of a frame's Active Message. With both directions
// open, the frame carries our consumed count of the peer's frames, so a busy
// pair needs no separate credit messages; only when the reverse direction's
// credits are AMs too: a credit put could otherwise land after, and undo, a
// newer piggybacked count. Returns the header's length (0: none); once the
// send is handed to UCX, note_header_sent() records the credit as reported.
std::size_t am_frame_header(Link& link, std::size_t slot, const void*& header) {
  header = nullptr;
  if (!link.receiving() || !link.in.by_active_message) return 0;
  uint64_t& credit = link.out->am_headers[slot];
  credit = link.in.expected - 1;
  header = &credit;
  return sizeof(credit);
}

void note_header_sent(Link& link, std::size_t slot, std::size_t header_length) {
  if (header_length != 0) link.in.reported = link.out->am_headers[slot];
}

}  // namespace

void put_frame(Engine& engine, Link& link, std::size_t slot, std::size_t frame_bytes) {
  Outbound& out = *link.out;
  std::byte* staging = out.staging->data() + slot * out.hot.slot_size;
  Request* requests = &out.in_flight[slot * 2];
  try {
    if (out.delivery == Delivery::active_message) {
      // The commit word travels too: it puts the payload 16-byte aligned in the
      // target's (16-aligned) receive buffer, and it repeats the sequence.
      const void* header = nullptr;
      const std::size_t header_length = am_frame_header(link, slot, header);
      requests[0] = link.endpoint.am_send(kAmFrame, header, header_length, staging,
                                          kCommitWordSize + frame_bytes);
      note_header_sent(link, slot, header_length);
      return;
    }
    // Ring: body first, then (after a fence) the commit word, so the target
    // never sees a commit word before the frame it commits.
    const uint64_t remote = out.ring->address() + slot * out.hot.slot_size;
    requests[0] = link.endpoint.put(staging + kCommitWordSize, frame_bytes,
                                    remote + kCommitWordSize, out.ring->rkey());
    engine.worker().fence();
    requests[1] = link.endpoint.put(staging, kCommitWordSize, remote, out.ring->rkey());
  } catch (const Error& error) {  // name the peer; the status text is appended once
    throw Error(error.ucs_status().value_or(UCS_ERR_IO_ERROR),
                "channel to " + link.peer_name + ": " +
                    (out.delivery == Delivery::active_message ? "ucp_am_send_nbx" : "ucp_put_nbx"));
  }
}

bool ring_doorbell(Link& link) noexcept {
  // Fire and forget: a request UCX still holds is freed when it completes.
  // If the send fails the peer is going away, which its endpoint reports.
  if (link.endpoint.handle() == nullptr) return false;
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  // REPLY: the target finds the ring by the endpoint the doorbell came from.
  params.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  const ucs_status_ptr_t request =
      ucp_am_send_nbx(link.endpoint.handle(), kAmDoorbell, nullptr, 0, nullptr, 0, &params);
  if (UCS_PTR_IS_ERR(request)) return false;
  if (UCS_PTR_IS_PTR(request)) ucp_request_free(request);
  return true;
}

void throw_frame_too_large(const Link& link, const Ifunc& ifunc, std::size_t payload_size,
                           std::size_t written) {
  const OutboundRing& ring = link.out->hot;
  if (written != payload_size) {
    throw Error(errc::frame_too_large, "ifunc '" + ifunc.name() + "': the payload fill wrote " +
                                           std::to_string(written) + " bytes, reserved " +
                                           std::to_string(payload_size));
  }
  throw Error(errc::frame_too_large,
              "ifunc '" + ifunc.name() + "': a " + std::to_string(payload_size) +
                  "-byte payload does not fit a " + std::to_string(ring.slot_size) +
                  "-byte ring slot (" + std::to_string(ring.capacity() - sizeof(FrameHeader)) +
                  " bytes of payload at most)");
}

// AM delivery of a large payload: the commit word and header from the staging
// slot, the payload from the caller and the code from the Ifunc, gathered by
// UCX into one Active Message (the target sees the same contiguous frame).
// Waits until UCX has let go of the caller's buffer.
SendStatus send_gathered(Engine& engine, Link& link, const Ifunc& ifunc,
                         std::span<const std::byte> payload) {
  Outbound& out = *link.out;
  OutboundRing& ring = out.hot;
  const uint64_t sequence = ring.next_sequence;
  const std::size_t slot = ring.next_slot;
  std::byte* at = staging_slot(engine, link, slot);
  bool with_code = false;
  if (!ring.last_held_valid || ring.last_held != ifunc.id()) [[unlikely]]
    with_code = prepare_code(link, ifunc, payload.size());
  const std::size_t code_size = with_code ? ifunc.code().size() : 0;
  FrameBuilder frame(std::span<std::byte>(at + kCommitWordSize, ring.capacity()));
  if (frame.begin(ifunc.codec(), ifunc.id(), static_cast<uint32_t>(sequence), payload.size(),
                  code_size) != errc::ok) [[unlikely]] {
    throw_frame_too_large(link, ifunc, payload.size(), payload.size());
  }
  std::memcpy(at, &sequence, sizeof(sequence));
  std::array<ucp_dt_iov_t, 3>& pieces = out.am_pieces[slot];
  std::size_t count = 0;
  pieces[count++] = {at, kCommitWordSize + sizeof(FrameHeader)};
  pieces[count++] = {const_cast<std::byte*>(payload.data()), payload.size()};
  // The code stays alive in out.sent (prepare_code keeps it for resends).
  if (with_code) pieces[count++] = {const_cast<std::byte*>(ifunc.code().data()), code_size};
  Request& request = out.in_flight[slot * 2];
  try {
    const void* header = nullptr;
    const std::size_t header_length = am_frame_header(link, slot, header);
    request = link.endpoint.am_send_gathered(kAmFrame, header, header_length, pieces.data(), count);
    note_header_sent(link, slot, header_length);
  } catch (const Error& error) {
    throw Error(error.ucs_status().value_or(UCS_ERR_IO_ERROR),
                "channel to " + link.peer_name + ": ucp_am_send_nbx");
  }
  ring.advance();
  ++ring.stats.frames_sent;
  ring.stats.last_frame_size = frame.size();
  ring.stats.frames_with_code += with_code ? 1 : 0;
  ++ring.stats.frames_gathered;
  // The caller's buffer must outlive UCX's use of it: wait. A send UCX has
  // not finished by the timeout is cancelled (and waited for, bounded) before
  // the caller gets its buffer back; the frame may or may not have gone, so
  // the sequence has a hole and the channel cannot go on.
  const auto deadline = std::chrono::steady_clock::now() + out.timeout;
  ucs_status_t status;
  while ((status = request.reap()) == UCS_INPROGRESS) {
    engine.progress();
    if (std::chrono::steady_clock::now() > deadline) [[unlikely]] {
      request.cancel(engine.worker());
      out.break_with(errc::timeout, "a " + std::to_string(payload.size()) +
                                        "-byte payload was not sent within " +
                                        std::to_string(out.timeout.count()) +
                                        " ms and was cancelled; the channel cannot go on");
      throw Error(errc::timeout, "channel to " + link.peer_name + ": send: " + out.broken);
    }
  }
  if (status != UCS_OK) [[unlikely]] {
    out.break_with(errc::timeout, "a gathered send failed; the channel cannot go on");
    throw Error(status, "channel to " + link.peer_name + ": ucp_am_send_nbx");
  }
  return with_code ? SendStatus::sent_with_code : SendStatus::sent_cached;
}

void Outbound::take_credit(uint64_t consumed) noexcept {
  std::atomic_ref<uint64_t> word(*hot.consumed_word);
  if (consumed <= word.load(std::memory_order_relaxed)) return;
  if (consumed > hot.next_sequence - 1) [[unlikely]] {
    try {
      break_with(errc::protocol, "the target reported " + std::to_string(consumed) +
                                     " frames consumed of " + std::to_string(hot.next_sequence - 1) +
                                     " sent; the channel cannot go on");
    } catch (...) {  // no memory for the text: the credit is dropped all the same
    }
    return;
  }
  word.store(consumed, std::memory_order_release);
}

bool Outbound::credit_consistent() noexcept {
  const uint64_t consumed = hot.consumed();
  if (consumed <= hot.next_sequence - 1) [[likely]]
    return true;
  try {
    break_with(errc::protocol, "the target reported " + std::to_string(consumed) +
                                   " frames consumed of " + std::to_string(hot.next_sequence - 1) +
                                   " sent; the channel cannot go on");
  } catch (...) {
  }
  return false;
}

}  // namespace detail

// ---- Channel -------------------------------------------------------------------

namespace {

// A payload of one or two words is copied with two 8-byte moves (which
// overlap below 16 bytes): a call into the C library's memcpy cost ~27
// instructions for 8 bytes, a fifth of what the rest of a send costs
// (callgrind, docs/performance.md, "The streaming rate on 1.22").
void copy_payload(std::byte* out, std::span<const std::byte> payload) noexcept {
  const std::size_t n = payload.size();
  if (n >= 8 && n <= 16) {
    uint64_t head;
    uint64_t tail;
    std::memcpy(&head, payload.data(), sizeof(head));
    std::memcpy(&tail, payload.data() + n - sizeof(tail), sizeof(tail));
    std::memcpy(out, &head, sizeof(head));
    std::memcpy(out + n - sizeof(tail), &tail, sizeof(tail));
  } else if (n != 0) {
    std::memcpy(out, payload.data(), n);
  }
}

}  // namespace

SendStatus Channel::send_bytes(const Ifunc& ifunc, std::span<const std::byte> payload) {
  if (payload.size() < kGatherBytes || ring_->direct_ring != nullptr ||
      link_->out->delivery != Delivery::active_message) {
    return send_with(ifunc, payload.size(), [&](std::byte* out) { copy_payload(out, payload); });
  }
  while (ring_->full()) wait_for_credit();
  return detail::send_gathered(*engine_, *link_, ifunc, payload);
}

Channel::Channel(std::shared_ptr<detail::Engine> engine,
                 std::shared_ptr<detail::Link> link) noexcept
    : engine_(std::move(engine)), link_(std::move(link)), ring_(&link_->out->hot) {}

Channel::Channel(Channel&& other) noexcept
    : engine_(std::move(other.engine_)),
      link_(std::move(other.link_)),
      ring_(std::exchange(other.ring_, nullptr)) {}

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    release();
    engine_ = std::move(other.engine_);
    link_ = std::move(other.link_);
    ring_ = std::exchange(other.ring_, nullptr);
  }
  return *this;
}

Channel::~Channel() {
  release();
}

void Channel::release() noexcept {
  if (!link_) return;
  engine_->say_goodbye(link_);
  ring_ = nullptr;
  link_.reset();
  engine_.reset();
}

void Channel::wait_for_credit() {
  // Over shared memory credits land without progress: look at the credit word
  // a few times before paying for a round of UCX progress. A streaming source
  // comes here for almost every frame, so the clock is read only once a round
  // of progress was needed.
  std::chrono::steady_clock::time_point deadline{};
  std::chrono::steady_clock::time_point yield_from{};
  const int spins = spins_before_progress(*link_->out);
  for (;;) {
    // A round of progress costs a system call (the tcp wire-up lane's epoll),
    // during which arriving credit cannot be used: spin a while first, pausing
    // so the target's core runs freely.
    for (int spin = 0; spin < spins; ++spin) {
      if (!ring_->full()) return;
      cpu_relax();
    }
    engine_->check_not_threaded("Channel::send");
    engine_->progress();
    // Frames that reached us meanwhile (AM delivery runs them in progress)
    // are owed credits: a peer waiting on those while we wait on it would
    // otherwise wait for good.
    engine_->return_credits(detail::Engine::CreditTiming::now);
    (void)link_->out->credit_consistent();  // if not, check_sendable says why
    engine_->check_sendable(*link_, "send");
    const auto now = std::chrono::steady_clock::now();
    if (deadline == std::chrono::steady_clock::time_point{}) {
      deadline = now + link_->out->timeout;
      yield_from = std::exchange(ring_->woke_target, false) ? now : now + kYieldAfter;
    } else if (now > yield_from) {
      sched_yield();  // the target may be waiting for this core (kYieldAfter)
    }
    if (now > deadline) [[unlikely]] {
      throw Error(errc::timeout, "channel to " + link_->peer_name +
                                     ": send: the ring stayed full for " +
                                     std::to_string(link_->out->timeout.count()) + " ms");
    }
  }
}

void Channel::flush() {
  flush(link_->out->timeout);
}

void Channel::flush(std::chrono::milliseconds limit) {
  engine_->check_not_threaded("Channel::flush");
  const uint64_t last = ring_->next_sequence - 1;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + limit;
  bool yielding = std::exchange(ring_->woke_target, false);
  // As in wait_for_credit: a round of progress is a system call on some UCX
  // versions (1.22's tcp wire-up lane stays polled), during which a credit
  // stored into the ring cannot be seen. 32 bare checks here left a cached
  // round trip over shm at 2.6x UCX 1.22's AM; 128 paused ones, at 1.0x.
  const int spins = spins_before_progress(*link_->out);
  while (ring_->consumed() < last) {
    for (int spin = 0; spin < spins && ring_->consumed() < last; ++spin) cpu_relax();
    if (ring_->consumed() >= last) break;
    // Waited a while: let the target run if the scheduler put it on our core.
    if (yielding) sched_yield();
    engine_->progress();
    engine_->return_credits(detail::Engine::CreditTiming::now);  // as in wait_for_credit
    engine_->check_sendable(*link_, "flush");
    const auto now = std::chrono::steady_clock::now();
    yielding = now - start > kYieldAfter;
    if (now > deadline) {
      throw Error(errc::timeout,
                  "channel to " + link_->peer_name + ": flush: the target consumed " +
                      std::to_string(ring_->consumed()) + " of " + std::to_string(last) +
                      " frames in " + std::to_string(limit.count()) + " ms");
    }
  }
  if (!link_->out->credit_consistent()) engine_->check_sendable(*link_, "flush");  // throws
  // A refusal travels ahead of the credit that follows it (the target fences
  // a credit put after it; AM credits share its lane): once the credit is
  // seen, one round of progress has the refusal. A credit read in place
  // (the target's credit line) says how many refusals were sent: wait until
  // they are all here, however the lanes raced. Only code can be refused.
  detail::Outbound& out = *link_->out;
  if (out.code_unconfirmed) {
    engine_->progress();
    out.code_unconfirmed = false;
  }
  if (!out.credit_is_local()) {
    const uint64_t sent = std::atomic_ref<uint64_t>(out.hot.consumed_word[detail::kCreditLineRefusals])
                              .load(std::memory_order_relaxed);
    while (out.refusals_heard < sent) {
      engine_->progress();
      engine_->check_sendable(*link_, "flush");
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(errc::timeout, "channel to " + link_->peer_name + ": flush: " +
                                       std::to_string(sent - out.refusals_heard) +
                                       " code refusal(s) the target sent did not arrive in " +
                                       std::to_string(limit.count()) + " ms");
      }
    }
  }
  engine_->throw_code_refusal(*link_, "flush");
}

void Channel::close() {
  if (!link_) return;
  engine_->check_not_threaded("Channel::close");
  std::exception_ptr error;
  try {
    flush();
  } catch (...) {
    error = std::current_exception();
  }
  // Goodbye, then wait (bounded) until UCX has carried it and let the endpoint go.
  std::shared_ptr<detail::Engine> engine = engine_;
  std::shared_ptr<detail::Link> link = link_;
  release();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (engine->closing(*link) && std::chrono::steady_clock::now() < deadline) engine->progress();
  if (error) std::rethrow_exception(error);
}

unsigned Channel::progress() {
  engine_->check_not_threaded("Channel::progress");
  return engine_->progress();
}

bool Channel::target_holds(CodeId id) const noexcept {
  return link_->out->held.contains(id);
}

void Channel::forget_held_code() noexcept {
  link_->out->held.clear();
  ring_->last_held_valid = false;
}

const Endpoint& Channel::endpoint() const noexcept {
  return link_->endpoint;
}

Delivery Channel::delivery() const noexcept {
  return link_->out->delivery;
}

// ---- Source --------------------------------------------------------------------

Source::Source(Worker worker) : engine_(detail::Engine::of(worker)) {}

Channel Source::connect(const std::string& host, uint16_t port, const ChannelOptions& options) {
  engine_->check_not_threaded("Source::connect");
  return Channel(engine_, engine_->connect(host, port, options, -1, nullptr));
}

std::vector<Channel> Source::connect_all(std::span<const ReceiverAddress> targets,
                                         const ChannelOptions& options,
                                         std::size_t in_flight_per_target) {
  engine_->check_not_threaded("Source::connect_all");
  std::vector<std::shared_ptr<detail::Link>> links =
      engine_->connect_all(targets, options, in_flight_per_target);
  std::vector<Channel> channels;
  channels.reserve(links.size());
  for (std::shared_ptr<detail::Link>& link : links)
    channels.push_back(Channel(engine_, std::move(link)));
  return channels;
}

unsigned Source::progress() {
  engine_->check_not_threaded("Source::progress");
  return engine_->progress();
}

const Worker& Source::worker() const noexcept {
  return engine_->worker();
}

}  // namespace threechains

// ---- test hook ---------------------------------------------------------------------

#include "engine/testing.hpp"

namespace threechains {

void ChannelAccess::send_raw_frame(Channel& channel, std::span<const std::byte> frame) {
  while (channel.ring_->full()) channel.wait_for_credit();
  detail::OutboundRing& ring = *channel.ring_;
  if (frame.size() > ring.capacity()) {
    throw Error(errc::frame_too_large, std::to_string(frame.size()) +
                                           "-byte frame does not fit a " +
                                           std::to_string(ring.slot_size) + "-byte ring slot");
  }
  const std::size_t slot = ring.next_slot;
  std::byte* at = ring.direct_ring != nullptr
                      ? ring.direct_ring + slot * ring.slot_size
                      : detail::staging_slot(*channel.engine_, *channel.link_, slot);
  if (!frame.empty()) std::memcpy(at + detail::kCommitWordSize, frame.data(), frame.size());
  channel.commit(at, slot, frame.size());
}

void ChannelAccess::send_raw_frame(Channel& channel, std::span<const std::byte> frame,
                                   uint64_t commit_word) {
  while (channel.ring_->full()) channel.wait_for_credit();
  detail::OutboundRing& ring = *channel.ring_;
  if (frame.size() > ring.capacity()) throw Error(errc::frame_too_large, "raw frame too large");
  const std::size_t slot = ring.next_slot;
  if (ring.direct_ring != nullptr) {
    std::byte* at = ring.direct_ring + slot * ring.slot_size;
    if (!frame.empty()) std::memcpy(at + detail::kCommitWordSize, frame.data(), frame.size());
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at))
        .store(commit_word, std::memory_order_release);
    detail::wake_if_asleep(ring, *channel.link_);
  } else {
    std::byte* at = detail::staging_slot(*channel.engine_, *channel.link_, slot);
    if (!frame.empty()) std::memcpy(at + detail::kCommitWordSize, frame.data(), frame.size());
    std::memcpy(at, &commit_word, sizeof(commit_word));
    detail::put_frame(*channel.engine_, *channel.link_, slot, frame.size());
  }
  ring.advance();
  ++ring.stats.frames_sent;
}

std::byte* ChannelAccess::next_frame_in_target(Channel& channel) {
  detail::OutboundRing& ring = *channel.ring_;
  if (ring.direct_ring == nullptr) return nullptr;
  const std::size_t slot = ring.next_slot;
  return ring.direct_ring + slot * ring.slot_size + detail::kCommitWordSize;
}

void ChannelAccess::store_credit(Channel& channel, uint64_t consumed) {
  std::atomic_ref<uint64_t>(*channel.ring_->consumed_word).store(consumed, std::memory_order_release);
}

}  // namespace threechains
