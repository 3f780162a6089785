// C API: the Receiver, and the option translation the Node shares.
#include "capi/handles.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

using threechains::capi::all_given;
using threechains::capi::fail;
using threechains::capi::guarded;

namespace threechains::capi {

threechains_receiver_options default_receiver_options() noexcept {
  const ReceiverOptions defaults;
  threechains_receiver_options options{};
  options.size = sizeof(options);
  options.port = defaults.port;
  options.max_slots = defaults.max_slots;
  options.max_slot_size = defaults.max_slot_size;
  return options;
}

ReceiverOptions receiver_options(const threechains_receiver_options& given) {
  ReceiverOptions options;
  options.port = given.port;
  if (given.trust != nullptr) options.trust = given.trust->trust;
  if (given.identity != nullptr) options.identity = given.identity->key;
  options.target_args = given.target_args;
  if (given.size >= offsetof(threechains_receiver_options, target_args_bytes) + sizeof(size_t))
    options.target_args_bytes = given.target_args_bytes;
  if (given.size >= offsetof(threechains_receiver_options, gpu_device) + sizeof(int) &&
      given.gpu != 0) {
    options.gpu = GpuOptions{};
    options.gpu->device = given.gpu_device;
  }
  if (given.size >= offsetof(threechains_receiver_options, max_code_bytes_per_key) + sizeof(size_t)) {
    ConfinementOptions& confinement = options.jit.confinement;
    if (given.confined_time_budget_us != 0)
      confinement.time_budget = std::chrono::microseconds(given.confined_time_budget_us);
    if (given.compile_time_limit_ms != 0)
      confinement.compile_time_limit = std::chrono::milliseconds(given.compile_time_limit_ms);
    if (given.compile_memory_limit != 0) confinement.compile_memory_limit = given.compile_memory_limit;
    if (given.max_code_bytes_per_key != 0)
      options.limits.max_code_bytes_per_key = given.max_code_bytes_per_key;
  }
  if (given.size >= offsetof(threechains_receiver_options, helper_cpu_count) + sizeof(size_t) &&
      given.helper_cpu_count != 0) {
    if (given.helper_cpus == nullptr)
      throw Error(errc::invalid_argument, "helper_cpus is NULL and helper_cpu_count is not 0");
    options.jit.helper_cpus.assign(given.helper_cpus, given.helper_cpus + given.helper_cpu_count);
  }
  options.max_slots = given.max_slots;
  options.max_slot_size = given.max_slot_size;
  if (given.unrestricted_imports != 0) options.jit.imports = ImportPolicy::unrestricted();
  if (given.on_error != nullptr) {
    options.on_error = [callback = given.on_error, user = given.on_error_user](const Error& e) {
      callback(user, status_of(e), e.what());
    };
  }
  return options;
}

}  // namespace threechains::capi

extern "C" {

void threechains_receiver_options_init(threechains_receiver_options* options) {
  if (options != nullptr) *options = threechains::capi::default_receiver_options();
}

threechains_status threechains_receiver_create(threechains_worker* worker,
                                               const threechains_receiver_options* options,
                                               threechains_receiver** out) {
  if (!all_given(worker, out)) return fail(THREECHAINS_INVALID_ARGUMENT, "worker or out is NULL");
  return guarded("threechains_receiver_create", [&] {
    const threechains_receiver_options given =
        threechains::capi::read_options(options, threechains::capi::default_receiver_options());
    *out = new threechains_receiver{
        threechains::Receiver(worker->worker, threechains::capi::receiver_options(given))};
  });
}
void threechains_receiver_destroy(threechains_receiver* receiver) {
  delete receiver;
}

uint16_t threechains_receiver_port(const threechains_receiver* receiver) {
  return receiver != nullptr ? receiver->receiver.port() : 0;
}

threechains_status threechains_receiver_poll(threechains_receiver* receiver, unsigned* dispatched) {
  if (!all_given(receiver)) return fail(THREECHAINS_INVALID_ARGUMENT, "receiver is NULL");
  unsigned ran = 0;
  const threechains_status status =
      guarded("threechains_receiver_poll", [&] { ran = receiver->receiver.poll(); });
  if (dispatched != nullptr) *dispatched = ran;
  return status;
}

threechains_status threechains_receiver_start(threechains_receiver* receiver) {
  if (!all_given(receiver)) return fail(THREECHAINS_INVALID_ARGUMENT, "receiver is NULL");
  return guarded("threechains_receiver_start", [&] {
    receiver->receiver.start();
    receiver->threaded = true;
  });
}
void threechains_receiver_stop(threechains_receiver* receiver) {
  if (receiver == nullptr) return;
  receiver->receiver.stop();
  receiver->threaded = false;
}

threechains_status threechains_receiver_set_target_args(threechains_receiver* receiver,
                                                        void* target_args) {
  if (!all_given(receiver)) return fail(THREECHAINS_INVALID_ARGUMENT, "receiver is NULL");
  return guarded("threechains_receiver_set_target_args",
                 [&] { receiver->receiver.set_target_args(target_args); });
}

threechains_status threechains_receiver_set_target_args_sized(threechains_receiver* receiver,
                                                              void* target_args, size_t bytes) {
  if (!all_given(receiver)) return fail(THREECHAINS_INVALID_ARGUMENT, "receiver is NULL");
  return guarded("threechains_receiver_set_target_args_sized",
                 [&] { receiver->receiver.set_target_args(target_args, bytes); });
}

threechains_status threechains_receiver_allocate_exposed(threechains_receiver* receiver,
                                                         const char* name, size_t bytes,
                                                         int writable, void** out) {
  if (!all_given(receiver, name, out))
    return fail(THREECHAINS_INVALID_ARGUMENT, "receiver, name or out is NULL");
  *out = nullptr;
  return guarded("threechains_receiver_allocate_exposed", [&] {
    *out = receiver->receiver.cache().allocate_exposed(name, bytes, writable != 0).data();
  });
}

threechains_status threechains_receiver_stats_get(const threechains_receiver* receiver,
                                                  threechains_receiver_stats* stats) {
  if (!all_given(receiver, stats)) {
    return fail(THREECHAINS_INVALID_ARGUMENT, "receiver or stats is NULL");
  }
  if (receiver->threaded) {  // reading them now would race with the thread's writes
    return fail(THREECHAINS_INVALID_ARGUMENT,
                "threechains_receiver_stats_get: the progress thread runs and writes the "
                "statistics (call threechains_receiver_stop first)");
  }
  const threechains::ReceiverStats& s = receiver->receiver.stats();
  threechains_receiver_stats all{};
  all.size = stats->size;
  all.frames_dispatched = s.frames_dispatched;
  all.frames_rejected = s.frames_rejected;
  all.code_loads = s.code_loads;
  all.cache_misses = s.cache_misses;
  all.peers_connected = s.peers_connected;
  all.peers_closed = s.peers_closed;
  all.peers_lost = s.peers_lost;
  all.peers_refused = s.peers_refused;
  all.code_refused = s.code_refused;
  all.evictions = s.evictions;
  all.last_load_ns = static_cast<uint64_t>(s.last_load_time.count());
  all.code_trapped = s.code_trapped;
  all.sleeps = s.sleeps;
  all.doorbells = s.doorbells;
  all.frames_in_window_runs = s.frames_in_window_runs;
  std::memcpy(static_cast<void*>(stats), &all, std::min(stats->size, sizeof(all)));
  return THREECHAINS_OK;
}

threechains_status threechains_receiver_ifunc_stats(const threechains_receiver* receiver,
                                                    threechains_ifunc_stats* out,
                                                    size_t capacity, size_t entry_size,
                                                    size_t* count) {
  if (!all_given(receiver, count) || (capacity != 0 && (out == nullptr || entry_size == 0))) {
    return fail(THREECHAINS_INVALID_ARGUMENT,
                "threechains_receiver_ifunc_stats: receiver or count is NULL, or capacity is not 0 "
                "and out is NULL or entry_size 0");
  }
  if (receiver->threaded) {
    return fail(THREECHAINS_INVALID_ARGUMENT,
                "threechains_receiver_ifunc_stats: the progress thread runs and writes the "
                "statistics (call threechains_receiver_stop first)");
  }
  return guarded("threechains_receiver_ifunc_stats", [&] {
    const std::vector<threechains::IfuncStats> all = receiver->receiver.ifunc_stats();
    *count = all.size();
    const std::size_t copy = std::min(entry_size, sizeof(threechains_ifunc_stats));
    for (std::size_t k = 0; k < std::min(capacity, all.size()); ++k) {
      const threechains::IfuncStats& s = all[k];
      threechains_ifunc_stats entry{};
      entry.code = s.code;
      std::snprintf(entry.name, sizeof(entry.name), "%s", s.name.c_str());
      entry.loaded = s.loaded ? 1 : 0;
      entry.in_window = s.in_window ? 1 : 0;
      entry.calls = s.calls;
      entry.payload_bytes = s.payload_bytes;
      entry.refusals = s.refusals;
      entry.traps = s.traps;
      entry.timed_calls = s.timed_calls;
      entry.timed_ns = static_cast<uint64_t>(s.timed.count());
      char* slot = reinterpret_cast<char*>(out) + k * entry_size;
      std::memcpy(slot, &entry, copy);
      if (entry_size > copy) std::memset(slot + copy, 0, entry_size - copy);
    }
  });
}

std::size_t threechains_receiver_peers(const threechains_receiver* receiver) {
  return receiver != nullptr && !receiver->threaded ? receiver->receiver.peers() : 0;
}

threechains_status threechains_receiver_allocate_device(threechains_receiver* receiver,
                                                       const char* name, size_t bytes,
                                                       void** device_address) {
  if (!all_given(receiver, name, device_address))
    return fail(THREECHAINS_INVALID_ARGUMENT, "receiver, name or device_address is NULL");
  return guarded("threechains_receiver_allocate_device", [&] {
    *device_address = receiver->receiver.allocate_device(name, bytes);
  });
}

threechains_status threechains_receiver_expose_device(threechains_receiver* receiver,
                                                     const char* name, void* device_address,
                                                     size_t bytes) {
  if (!all_given(receiver, name, device_address))
    return fail(THREECHAINS_INVALID_ARGUMENT, "receiver, name or device_address is NULL");
  return guarded("threechains_receiver_expose_device",
                 [&] { receiver->receiver.expose_device(name, device_address, bytes); });
}

threechains_status threechains_receiver_copy_to_device(threechains_receiver* receiver,
                                                      void* device_address, const void* host,
                                                      size_t bytes) {
  if (!all_given(receiver, device_address, host))
    return fail(THREECHAINS_INVALID_ARGUMENT, "receiver, device_address or host is NULL");
  return guarded("threechains_receiver_copy_to_device",
                 [&] { receiver->receiver.copy_to_device(device_address, host, bytes); });
}

threechains_status threechains_receiver_copy_from_device(threechains_receiver* receiver,
                                                        void* host, const void* device_address,
                                                        size_t bytes) {
  if (!all_given(receiver, host, device_address))
    return fail(THREECHAINS_INVALID_ARGUMENT, "receiver, host or device_address is NULL");
  return guarded("threechains_receiver_copy_from_device",
                 [&] { receiver->receiver.copy_from_device(host, device_address, bytes); });
}

}  // extern "C"
