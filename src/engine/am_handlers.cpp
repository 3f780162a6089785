// Engine, Active Message handlers: each checks what it was given, records it
// and returns; the work happens in progress() (handle_control and kin).
#include "engine/admission.hpp"
#include "engine/engine.hpp"

#include <threechains/container.hpp>

#include <cstring>

namespace threechains::detail {

ucs_status_t Engine::on_hello(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  Handshake* handshake = nullptr;
  if (Link* link = self->find(param)) {
    if (!link->refused) handshake = &link->handshake;
  } else if (Candidate* candidate = self->candidate(param)) {
    if (!candidate->refused) handshake = &candidate->handshake;
  }
  if (handshake != nullptr &&
      handshake->take_hello(header, header_length, data, length, rendezvous))
    self->control_pending_ = true;
  return UCS_OK;
}

ucs_status_t Engine::on_welcome(void* arg, const void* header, std::size_t header_length,
                                void* data, std::size_t length, const ucp_am_recv_param_t* param) {
  Link* link = static_cast<Engine*>(arg)->find(param);
  if (link == nullptr || !link->out || header_length != sizeof(Welcome)) return UCS_OK;
  Outbound& out = *link->out;
  Welcome welcome;
  std::memcpy(&welcome, header, sizeof(welcome));
  if (out.state == Outbound::State::open && welcome.status != UCS_OK) {
    // A refusal after the ring was granted: the target disconnects us (our
    // ring's state went inconsistent, we ignored credits) and says why.
    std::string reason = "the target disconnected this channel";
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0 && length != 0)
      reason.append(": ").append(static_cast<const char*>(data), std::min(length, kMaxReasonSize));
    out.break_with(errc::peer_refused, std::move(reason));
    return UCS_OK;
  }
  if (out.state != Outbound::State::connecting) return UCS_OK;
  if (welcome.version != kProtocolVersion || welcome.status != UCS_OK) {
    out.refusal =
        welcome.status != UCS_OK ? static_cast<ucs_status_t>(welcome.status) : UCS_ERR_UNSUPPORTED;
    if (welcome.version != kProtocolVersion) {
      out.refusal_reason = "the Receiver speaks protocol version " +
                           std::to_string(welcome.version) + ", this build " +
                           std::to_string(kProtocolVersion);
    } else if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
      out.refusal_reason.assign(static_cast<const char*>(data), std::min(length, kMaxReasonSize));
    }
    out.state = Outbound::State::refused;
    return UCS_OK;
  }
  if (out.target_key && !out.target_proven) {
    // A ring from a Receiver that never proved the key we insist on (no
    // CHALLENGE, or a WELCOME ahead of it): not one frame goes there.
    out.refusal = UCS_ERR_REJECTED;
    out.refusal_reason =
        "the Receiver did not prove it holds the key in ChannelOptions::target_key";
    out.state = Outbound::State::refused;
    return UCS_OK;
  }
  try {
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 || length == 0 ||
        length > kMaxRkeySize) {
      throw Error(errc::protocol, "a WELCOME without a usable rkey");
    }
    out.ring.emplace(link->endpoint, welcome.ring_address,
                     std::size_t{welcome.slots} * welcome.slot_size + kCreditLineSize,
                     std::span<const std::byte>(static_cast<const std::byte*>(data), length));
    if (out.ring->outside_its_segment())
      throw Error(errc::protocol, "the WELCOME's ring lies outside the memory its rkey maps");
    out.credit_by_put = (welcome.flags & kWelcomeCreditByPut) != 0;
    out.hot.slots = welcome.slots;
    out.hot.slot_size = welcome.slot_size;
    out.state = Outbound::State::open;
  } catch (const Error& error) {  // never let an exception cross UCX's C frames
    out.refusal = error.ucs_status().value_or(UCS_ERR_INVALID_PARAM);
    out.refusal_reason = error.what();
    out.state = Outbound::State::refused;
  }
  return UCS_OK;
}

ucs_status_t Engine::on_need_code(void* arg, const void* header, std::size_t header_length, void*,
                                  std::size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  if (link == nullptr || !link->sending() || header_length != sizeof(NeedCode)) return UCS_OK;
  NeedCode request;
  std::memcpy(&request, header, sizeof(request));
  link->out->code_requests.push_back(request);
  self->code_requests_pending_ = true;
  return UCS_OK;
}

ucs_status_t Engine::on_code(void* arg, const void* header, std::size_t header_length, void* data,
                             std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  // Code only from a peer we granted a ring (it proved its key), and only of
  // a size we accept: nothing else is even copied.
  if (link == nullptr || !link->receiving() || header_length != sizeof(CodeDelivery) ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 ||
      link->in.arrivals.size() >= kMaxCodeArrivals) {
    return UCS_OK;
  }
  Inbound::CodeArrival arrival;
  std::memcpy(&arrival.header, header, sizeof(CodeDelivery));
  if (self->target_ && length > self->target_->options.limits.max_code_bytes) {
    arrival.too_large = length;
  } else {
    arrival.code.assign(static_cast<const std::byte*>(data),
                        static_cast<const std::byte*>(data) + length);
  }
  link->in.arrivals.push_back(std::move(arrival));
  self->control_pending_ = true;
  return UCS_OK;
}

// AM delivery: credits come back as AMs; they land in the same credit word.
ucs_status_t Engine::on_credit(void* arg, const void* header, std::size_t header_length, void*,
                               std::size_t, const ucp_am_recv_param_t* param) {
  Link* link = static_cast<Engine*>(arg)->find(param);
  if (link == nullptr || !link->out || header_length != sizeof(uint64_t) ||
      !link->out->credit_is_local())
    return UCS_OK;
  uint64_t consumed;
  std::memcpy(&consumed, header, sizeof(consumed));
  link->out->take_credit(consumed);
  return UCS_OK;
}

ucs_status_t Engine::on_challenge(void* arg, const void* header, std::size_t header_length, void*,
                                  std::size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  if (link == nullptr || !link->out || link->out->state != Outbound::State::connecting ||
      header_length != sizeof(Challenge)) {
    return UCS_OK;
  }
  link->out->challenge.emplace();
  std::memcpy(&*link->out->challenge, header, sizeof(Challenge));
  self->control_pending_ = true;
  return UCS_OK;
}

ucs_status_t Engine::on_proof(void* arg, const void* header, std::size_t header_length, void*,
                              std::size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Handshake* handshake = nullptr;
  if (Link* link = self->find(param)) {
    if (!link->refused) handshake = &link->handshake;
  } else if (Candidate* candidate = self->candidate(param)) {
    if (!candidate->refused) handshake = &candidate->handshake;
  }
  if (handshake != nullptr && handshake->take_proof(header, header_length))
    self->control_pending_ = true;
  return UCS_OK;
}

ucs_status_t Engine::on_code_refused(void* arg, const void* header, std::size_t header_length,
                                     void* data, std::size_t length,
                                     const ucp_am_recv_param_t* param) {
  Link* link = static_cast<Engine*>(arg)->find(param);
  if (link == nullptr || !link->out || header_length != sizeof(CodeRefused)) return UCS_OK;
  CodeRefused refused;
  std::memcpy(&refused, header, sizeof(refused));
  Outbound& out = *link->out;
  ++out.refusals_heard;
  out.held.erase(refused.code_id);  // not held there: a later send carries the code again
  if (out.hot.last_held_valid && out.hot.last_held == refused.code_id)
    out.hot.last_held_valid = false;
  try {
    if (out.code_refusals.size() >= 16) {
      ++out.code_refusals_dropped;
    } else {
      std::string text;
      if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0)
        text.assign(static_cast<const char*>(data), std::min(length, kMaxReasonSize));
      out.code_refusals.push_back({static_cast<errc>(refused.error), std::move(text)});
    }
  } catch (...) {  // out of memory: the refusal is counted only
    ++out.code_refusals_dropped;
  }
  return UCS_OK;
}

// A source stored a frame into its ring, which we no longer poll (cold, or
// we slept): its arrival woke the event fd; the ring is polled again. From a
// peer that is no Link of ours (no ring), it did nothing else.
ucs_status_t Engine::on_doorbell(void* arg, const void*, std::size_t, void*, std::size_t,
                                 const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  if (link != nullptr && link->receiving() && link->in.cold) {
    link->in.cold = false;
    std::atomic_ref<uint64_t>(link->in.credit_line[kCreditLineSleep])
        .store(0, std::memory_order_relaxed);
    self->rewarm_pending_ = true;
    if (self->target_) ++self->target_->stats.doorbells;
  }
  return UCS_OK;
}

ucs_status_t Engine::on_bye(void* arg, const void*, std::size_t, void*, std::size_t,
                            const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  if (Link* link = self->find(param)) {
    link->in.bye = true;
    self->control_pending_ = true;
  } else if (Candidate* candidate = self->candidate(param)) {
    candidate->bye = true;  // it leaves before it proved anything: closed
    self->control_pending_ = true;
  }
  return UCS_OK;
}

}  // namespace threechains::detail
