// threechains::Receiver: a handle on its Worker's engine in the target role.
#include "engine/engine.hpp"
#include "gpu/gpu_service.hpp"

#include <algorithm>

#include <threechains/receiver.hpp>

namespace threechains {

Receiver::Receiver(Worker worker, ReceiverOptions options) : engine_(detail::Engine::of(worker)) {
  engine_->start_target(std::move(options));
}

Receiver::Receiver(std::shared_ptr<detail::Engine> engine) noexcept : engine_(std::move(engine)) {}

Receiver::Receiver(Receiver&& other) noexcept : engine_(std::move(other.engine_)) {}

Receiver& Receiver::operator=(Receiver&& other) noexcept {
  if (this != &other) {
    release();
    engine_ = std::move(other.engine_);
  }
  return *this;
}

Receiver::~Receiver() {
  release();
}

void Receiver::release() noexcept {
  if (!engine_) return;
  engine_->stop_thread();
  engine_->stop_target();
  engine_.reset();
}

uint16_t Receiver::port() const noexcept {
  return engine_->target().listener.port();
}

unsigned Receiver::poll() {
  engine_->check_not_threaded("Receiver::poll");
  return engine_->poll();
}

bool Receiver::wait(std::chrono::milliseconds limit) {
  engine_->check_not_threaded("Receiver::wait");
  return engine_->sleep_until_work(limit);
}

void Receiver::wake() noexcept {
  if (engine_) engine_->wake();
}

unsigned Receiver::serve_round() {
  const unsigned frames = poll();
  return frames + engine_->last_events();
}

const ProgressOptions& Receiver::progress_options() const noexcept {
  return engine_->target().options.progress;
}

void Receiver::start() {
  if (engine_->serves_as_node()) {
    throw Error(errc::invalid_argument,
                "Receiver::start: this Receiver belongs to a Node; use Node::start, which also "
                "carries out the Node's queued sends");
  }
  detail::Engine* engine = engine_.get();  // the thread is joined before the engine goes
  engine_->start_thread([engine] { return engine->poll() + engine->last_events(); },
                        [engine](std::chrono::milliseconds limit) {
                          (void)engine->sleep_until_work(limit);
                        },
                        progress_options(), 1024);
}

void Receiver::stop() noexcept {
  if (engine_) engine_->stop_thread();
}

JitCache& Receiver::cache() {
  engine_->check_not_threaded("Receiver::cache");
  return engine_->target().cache;
}

const ReceiverStats& Receiver::stats() const noexcept {
  return engine_->target().stats;
}

std::vector<IfuncStats> Receiver::ifunc_stats() const {
  engine_->check_not_threaded("Receiver::ifunc_stats");
  const detail::Target& t = engine_->target();
  std::vector<IfuncStats> out;
  out.reserve(t.ifunc_stats.size());
  for (const auto& [id, record] : t.ifunc_stats) {
    out.push_back(record.stats);
    out.back().loaded = t.cache_use.contains(id);
    const CachedIfunc* const cached = t.cache.find_ifunc(id);
    out.back().in_window = cached != nullptr && t.cache.in_window(*cached);
    if (&record.stats == t.counted) {  // what its latest calls added, not in the record yet
      out.back().calls += t.counted_calls;
      out.back().payload_bytes += t.counted_bytes;
    }
  }
  std::sort(out.begin(), out.end(), [](const IfuncStats& a, const IfuncStats& b) {
    return a.calls != b.calls ? a.calls > b.calls : a.code < b.code;
  });
  return out;
}

std::size_t Receiver::peers() const noexcept {
  return engine_->receiving_links();
}

void Receiver::set_target_args(void* args, std::size_t bytes) {
  engine_->check_not_threaded("Receiver::set_target_args");
  detail::Target& t = engine_->target();
  t.options.target_args = args;
  t.options.target_args_bytes = bytes;
  engine_->expose_anew();
}

GpuInfo Receiver::gpu_info() const {
  engine_->check_not_threaded("Receiver::gpu_info");  // the thread may be restarting the worker
  const detail::Target& t = engine_->target();
  if (t.gpu) return t.gpu->info();
  GpuInfo info;
  info.why_not = t.options.gpu ? t.gpu_unavailable : "not asked for (ReceiverOptions::gpu)";
  return info;
}

namespace {
gpu::Service& gpu_of(detail::Engine& engine, const char* what) {
  engine.check_not_threaded(what);
  detail::Target& t = engine.target();
  if (!t.gpu) {
    throw Error(errc::gpu_failed,
                std::string(what) + ": this Receiver has no GPU: " +
                    (t.options.gpu ? t.gpu_unavailable : "not asked for (ReceiverOptions::gpu)"));
  }
  return *t.gpu;
}

gpu::CUdeviceptr device_pointer(const void* address) {
  return static_cast<gpu::CUdeviceptr>(reinterpret_cast<uintptr_t>(address));
}
}  // namespace

void Receiver::expose_device(const std::string& name, void* device_address, std::size_t bytes) {
  gpu_of(*engine_, "Receiver::expose_device").expose(name, device_pointer(device_address), bytes);
}

void* Receiver::allocate_device(const std::string& name, std::size_t bytes) {
  const gpu::CUdeviceptr base = gpu_of(*engine_, "Receiver::allocate_device").allocate(name, bytes);
  return reinterpret_cast<void*>(static_cast<uintptr_t>(base));
}

void Receiver::copy_to_device(void* device_address, const void* host, std::size_t bytes) {
  gpu_of(*engine_, "Receiver::copy_to_device")
      .copy_to_device(device_pointer(device_address), host, bytes);
}

void Receiver::copy_from_device(void* host, const void* device_address, std::size_t bytes) {
  gpu_of(*engine_, "Receiver::copy_from_device")
      .copy_from_device(host, device_pointer(device_address), bytes);
}

void* Receiver::target_args() const noexcept {
  return engine_->target().options.target_args;
}

const Worker& Receiver::worker() const noexcept {
  return engine_->worker();
}

}  // namespace threechains
