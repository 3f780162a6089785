// C API: Sources and Channels.
#include "capi/handles.hpp"

using threechains::capi::all_given;
using threechains::capi::fail;
using threechains::capi::guarded;

namespace threechains::capi {

threechains_channel_options default_channel_options() noexcept {
  const ChannelOptions defaults;
  threechains_channel_options options{};
  options.size = sizeof(options);
  options.slots = defaults.slots;
  options.slot_size = defaults.slot_size;
  options.connect_timeout_ms = static_cast<uint32_t>(defaults.connect_timeout.count());
  options.timeout_ms = static_cast<uint32_t>(defaults.timeout.count());
  return options;
}

ChannelOptions channel_options(const threechains_channel_options& given) {
  ChannelOptions options;
  options.slots = given.slots;
  options.slot_size = given.slot_size;
  options.connect_timeout = std::chrono::milliseconds(given.connect_timeout_ms);
  options.timeout = std::chrono::milliseconds(given.timeout_ms);
  if (given.identity != nullptr) options.identity = given.identity->key;
  if (given.target_key != nullptr) options.target_key = given.target_key->key;
  return options;
}

}  // namespace threechains::capi

namespace {
std::span<const std::byte> bytes(const void* payload, std::size_t size) {
  return {static_cast<const std::byte*>(payload), size};
}
}  // namespace

extern "C" {

void threechains_channel_options_init(threechains_channel_options* options) {
  if (options != nullptr) *options = threechains::capi::default_channel_options();
}

threechains_status threechains_source_create(threechains_worker* worker,
                                             threechains_source** out) {
  if (!all_given(worker, out)) return fail(THREECHAINS_INVALID_ARGUMENT, "worker or out is NULL");
  return guarded("threechains_source_create",
                 [&] { *out = new threechains_source{threechains::Source(worker->worker)}; });
}
void threechains_source_destroy(threechains_source* source) { delete source; }

threechains_status threechains_source_connect(threechains_source* source, const char* host,
                                              uint16_t port,
                                              const threechains_channel_options* options,
                                              threechains_channel** out) {
  if (!all_given(source, host, out)) {
    return fail(THREECHAINS_INVALID_ARGUMENT, "source, host or out is NULL");
  }
  return guarded("threechains_source_connect", [&] {
    const threechains_channel_options given =
        threechains::capi::read_options(options, threechains::capi::default_channel_options());
    *out = new threechains_channel{
        source->source.connect(host, port, threechains::capi::channel_options(given))};
  });
}

threechains_status threechains_channel_send(threechains_channel* channel,
                                            const threechains_ifunc* ifunc, const void* payload,
                                            std::size_t size) {
  if (!all_given(channel, ifunc) || (payload == nullptr && size != 0)) {
    return fail(THREECHAINS_INVALID_ARGUMENT, "threechains_channel_send: a NULL argument");
  }
  return guarded("threechains_channel_send", [&] {
    (void)threechains::send(channel->channel, ifunc->ifunc, bytes(payload, size));
  });
}

threechains_status threechains_channel_try_send(threechains_channel* channel,
                                                const threechains_ifunc* ifunc,
                                                const void* payload, std::size_t size) {
  if (!all_given(channel, ifunc) || (payload == nullptr && size != 0)) {
    return fail(THREECHAINS_INVALID_ARGUMENT, "threechains_channel_try_send: a NULL argument");
  }
  threechains::SendStatus sent = threechains::SendStatus::sent_cached;
  const threechains_status status = guarded("threechains_channel_try_send", [&] {
    sent = channel->channel.try_send_with(ifunc->ifunc, size, [&](std::byte* out) {
      if (size != 0) std::memcpy(out, payload, size);
    });
  });
  if (status != THREECHAINS_OK) return status;
  return sent == threechains::SendStatus::would_block ? THREECHAINS_WOULD_BLOCK : THREECHAINS_OK;
}

threechains_status threechains_channel_flush(threechains_channel* channel) {
  if (!all_given(channel)) return fail(THREECHAINS_INVALID_ARGUMENT, "channel is NULL");
  return guarded("threechains_channel_flush", [&] { channel->channel.flush(); });
}
threechains_status threechains_channel_close(threechains_channel* channel) {
  if (!all_given(channel)) return fail(THREECHAINS_INVALID_ARGUMENT, "channel is NULL");
  return guarded("threechains_channel_close", [&] { channel->channel.close(); });
}
void threechains_channel_destroy(threechains_channel* channel) { delete channel; }

unsigned threechains_channel_progress(threechains_channel* channel) {
  if (channel == nullptr) return 0;
  unsigned events = 0;
  (void)guarded("threechains_channel_progress", [&] { events = channel->channel.progress(); });
  return events;
}
std::size_t threechains_channel_max_payload(const threechains_channel* channel) {
  return channel != nullptr ? channel->channel.max_payload() : 0;
}
uint64_t threechains_channel_frames_sent(const threechains_channel* channel) {
  return channel != nullptr ? channel->channel.stats().frames_sent : 0;
}

}  // extern "C"
