// A Receiver's GPU: kernels compiled here, run in a worker process.
#include "gpu/gpu_service.hpp"
#include "helper_program.hpp"

#include <llvm/Config/llvm-config.h>

#include <threechains/ifunc.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

extern char** environ;

namespace threechains::gpu {
namespace {

std::string hex_id(CodeId id) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(id));
  return text;
}

void cpu_relax() noexcept {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}


}  // namespace

Service::Service(const GpuOptions& options, std::size_t max_payload, std::string cache_directory)
    : driver_(Driver::get()),
      options_(options),
      max_payload_(std::max<std::size_t>(max_payload, 16)),
      cache_directory_(std::move(cache_directory)),
      libdevice_(options.libdevice.empty() ? find_libdevice() : options.libdevice),
      worker_program_(find_helper_program("threechains-gpu-worker", "THREECHAINS_GPU_WORKER")) {
  if (worker_program_.empty()) {
    throw Error(errc::gpu_failed,
                "the GPU worker program threechains-gpu-worker is neither beside libthreechains "
                "nor in libexec/threechains (THREECHAINS_GPU_WORKER names another)");
  }
  int count = 0;
  check(driver_.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (options.device < 0 || options.device >= count) {
    throw Error(errc::gpu_failed, "no CUDA device " + std::to_string(options.device) +
                                      " (this host has " + std::to_string(count) + ")");
  }
  check(driver_.cuDeviceGet(&device_, options.device), "cuDeviceGet");
  mapping_bytes_ = worker::mapping_bytes(max_payload_);
  mapping_fd_ = memfd_create("threechains-gpu", MFD_CLOEXEC);
  if (mapping_fd_ < 0 || ftruncate(mapping_fd_, static_cast<off_t>(mapping_bytes_)) != 0) {
    if (mapping_fd_ >= 0) close(mapping_fd_);
    throw Error(errc::gpu_failed, std::string("memfd for the GPU worker: ") + std::strerror(errno));
  }
  mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, mapping_fd_, 0);
  if (mapping_ == MAP_FAILED) {
    close(mapping_fd_);
    throw Error(errc::gpu_failed,
                std::string("mapping for the GPU worker: ") + std::strerror(errno));
  }
  control_ = static_cast<worker::Control*>(mapping_);
  payload_ = static_cast<std::byte*>(mapping_) + worker::kControlBytes;
  text_ = reinterpret_cast<char*>(payload_) +
          (mapping_bytes_ - worker::kControlBytes - worker::kTextBytes);
  try {
    start_worker();
  } catch (...) {
    munmap(mapping_, mapping_bytes_);
    close(mapping_fd_);
    throw;
  }
}

Service::~Service() {
  // Asked to go; killed if it does not within 200 ms (a kernel still runs):
  // a destructor does not wait long.
  if (pid_ > 0 &&
      post_and_wait(worker::Command::quit, std::chrono::milliseconds(200)) == Outcome::done &&
      pid_ > 0) {
    (void)waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  stop_worker();
  if (context_ != nullptr) {
    (void)driver_.cuCtxSetCurrent(context_);
    for (const Region& region : regions_) {
      if (region.owned != 0) (void)driver_.cuMemFree(region.owned);
    }
    (void)driver_.cuDevicePrimaryCtxRelease(device_);
  }
  munmap(mapping_, mapping_bytes_);
  close(mapping_fd_);
}

void Service::check(CUresult result, const char* what) const {
  if (result != CUDA_SUCCESS) [[unlikely]]
    throw Error(errc::gpu_failed, std::string(what) + ": " + driver_.describe(result));
}

void Service::start_worker() {
  // A fresh control block: the new worker counts from zero.
  std::memset(static_cast<void*>(control_), 0, sizeof(worker::Control));
  sequence_ = 0;
  const std::string device = std::to_string(options_.device);
  const std::string max_payload = std::to_string(max_payload_);
  const std::string mapped = std::to_string(options_.mapped_payload_max);
  const std::string parent = std::to_string(getpid());
  char* argv[] = {const_cast<char*>(worker_program_.c_str()), const_cast<char*>(device.c_str()),
                  const_cast<char*>(max_payload.c_str()),     const_cast<char*>(mapped.c_str()),
                  const_cast<char*>(parent.c_str()),          nullptr};
  // The worker's lifeline: it holds the read end, this process the write
  // end; when this process ends, however it ends, the worker reads EOF and
  // exits. (PR_SET_PDEATHSIG would fire when the thread that started it
  // ends: a Receiver's progress thread, which restarts workers.)
  int lifeline[2];
  if (pipe2(lifeline, O_CLOEXEC) != 0)
    throw Error(errc::gpu_failed, std::string("the GPU worker's pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, mapping_fd_, 3);  // dup2 clears close-on-exec
  posix_spawn_file_actions_adddup2(&actions, lifeline[0], 4);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, worker_program_.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(lifeline[0]);
  if (spawned != 0) {
    close(lifeline[1]);
    throw Error(errc::gpu_failed,
                "starting the GPU worker " + worker_program_ + ": " + std::strerror(spawned));
  }
  pid_ = pid;
  lifeline_ = lifeline[1];
  ++generation_;
  // Up once it has a context (hundreds of milliseconds; seconds on a cold GPU).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    const uint32_t ready = control_->ready.load(std::memory_order_acquire);
    if (ready == 1) break;
    int status = 0;
    const bool gone = waitpid(pid_, &status, WNOHANG) == pid_;
    if (ready == 2 || gone || std::chrono::steady_clock::now() > deadline) {
      const std::string why =
          ready == 2 ? std::string(control_->message)
          : gone     ? "it exited before it was up (status " + std::to_string(status) + ")"
                     : "it was not up within 60 s";
      if (gone) pid_ = -1;
      stop_worker();
      throw Error(errc::gpu_failed, "the GPU worker: " + why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  info_.available = true;
  info_.why_not.clear();
  info_.name = control_->device_name;
  info_.arch = control_->arch;
  info_.driver_version = control_->driver_version;
  info_.multiprocessors = control_->multiprocessors;
  info_.payload_pinned = control_->payload_pinned != 0;
  try {
    for (const Region& region : regions_) send_region(region);
  } catch (...) {
    stop_worker();
    throw;
  }
}

void Service::stop_worker() noexcept {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    (void)waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  if (lifeline_ >= 0) {
    close(lifeline_);
    lifeline_ = -1;
  }
}

void Service::restart_worker(std::string& why) noexcept {
  stop_worker();
  ++info_.context_rebuilds;
  try {
    start_worker();
    why += "; the GPU worker process was started again (device regions exposed again)";
  } catch (const Error& error) {
    info_.available = false;
    info_.why_not = error.context();
    why += "; the GPU worker could not be started again: " + info_.why_not;
  }
}

Service::Outcome Service::post_and_wait(worker::Command command,
                                        std::chrono::nanoseconds limit) noexcept {
  control_->command = command;
  const uint32_t sequence = ++sequence_;
  control_->posted.store(sequence, std::memory_order_seq_cst);
  if (control_->sleeping.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&control_->posted), FUTEX_WAKE, 1, nullptr,
            nullptr, 0);
  }
  // Spin while a short kernel runs; then let others have the core, and
  // while a long one runs sleep in small steps.
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + limit;
  for (unsigned polls = 0;; ++polls) {
    if (control_->completed.load(std::memory_order_acquire) == sequence) return Outcome::done;
    if ((polls & 255) != 255) {
      cpu_relax();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) return Outcome::timed_out;
    // Whether it died: asked only once a command takes over a millisecond
    // (a system call every few microseconds would slow every short kernel).
    if (now - start > std::chrono::milliseconds(1) && waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      // It may have finished the command before it went (a fault: it says
      // what happened, then exits).
      return control_->completed.load(std::memory_order_acquire) == sequence ? Outcome::done
                                                                             : Outcome::died;
    }
    if (now - start > std::chrono::milliseconds(10)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (now - start > std::chrono::microseconds(100)) {
      std::this_thread::yield();
    }
  }
}

std::string Service::cache_path(CodeId id) const {
  // Everything the PTX depends on besides the code: the GPU, the level, the
  // compiler, and libdevice (linked into it), by path.
  const std::string key = info_.arch + "-O" + std::to_string(options_.optimisation_level) +
                          "-llvm" + LLVM_VERSION_STRING + "-" +
                          hex_id(std::hash<std::string>{}(libdevice_));
  return cache_directory_ + "/gpu-" + hex_id(id) + "-" + key + ".ptx";
}

void Service::load_in_worker(Kernel& kernel, std::chrono::nanoseconds* driver_time) {
  if (pid_ <= 0) throw Error(errc::gpu_failed, "the GPU is unavailable: " + info_.why_not);
  if (kernel.ptx.size() >= worker::kTextBytes) {
    throw Error(errc::limit_exceeded, "GPU ifunc '" + kernel.name + "': its PTX (" +
                                          std::to_string(kernel.ptx.size()) + " bytes) is over " +
                                          std::to_string(worker::kTextBytes));
  }
  std::memcpy(text_, kernel.ptx.data(), kernel.ptx.size());
  control_->text_bytes = kernel.ptx.size();
  control_->id = kernel.id;
  std::snprintf(control_->name, sizeof(control_->name), "%s", kernel.name.c_str());
  const Outcome outcome = post_and_wait(worker::Command::load, std::chrono::seconds(120));
  if (outcome != Outcome::done || control_->status != 0) {
    std::string why = outcome == Outcome::done ? std::string(control_->message)
                      : outcome == Outcome::died
                          ? "the GPU worker died loading GPU ifunc '" + kernel.name + "'"
                          : "the GPU worker took over 120 s loading '" + kernel.name + "'";
    const int status =
        outcome == Outcome::done ? control_->status : static_cast<int>(errc::gpu_failed);
    if (outcome != Outcome::done || control_->poisoned != 0) restart_worker(why);
    throw Error(static_cast<errc>(status), why);
  }
  if (driver_time != nullptr) *driver_time = std::chrono::nanoseconds(control_->driver_load_ns);
  kernel.generation = generation_;
}

Service::Loaded Service::load(CodeId id, const ParsedImage& image) {
  if (!info_.available) throw Error(errc::gpu_failed, "the GPU is unavailable: " + info_.why_not);
  Loaded result;
  auto kernel = std::make_unique<Kernel>();
  kernel->id = id;
  kernel->name = image.name;
  const std::string path = cache_directory_.empty() ? std::string() : cache_path(id);
  const std::string header = "// threechains ptx " + hex_id(id);
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    std::string first;
    if (in && std::getline(in, first) && first == header) {
      std::stringstream text;
      text << in.rdbuf();
      kernel->ptx = text.str();
      result.from_cache = !kernel->ptx.empty();
    }
    if (result.from_cache) {
      try {
        load_in_worker(*kernel, &result.driver_load);
      } catch (const Error& error) {
        // PTX the driver rejects: a broken entry, or one the key did not
        // tell apart. Dropped, and compiled again below.
        if (!error.is(errc::gpu_failed) || pid_ <= 0) throw;
        std::error_code ignored;
        std::filesystem::remove(path, ignored);
        result.from_cache = false;
      }
    }
  }
  if (!result.from_cache) {
    const auto started = std::chrono::steady_clock::now();
    kernel->ptx = compile_ptx(image, {info_.arch, options_.optimisation_level, libdevice_}).text;
    result.compile = std::chrono::steady_clock::now() - started;
    if (!path.empty()) {
      // Written whole under a name of this process's own, then renamed: a
      // reader (another rank sharing the directory) never sees half of it.
      const std::string temporary =
          path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(++temporaries_);
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out << header << '\n' << kernel->ptx;
      out.close();
      std::error_code ignored;
      if (out) {
        std::filesystem::rename(temporary, path, ignored);
      } else {
        std::filesystem::remove(temporary, ignored);
      }
    }
    load_in_worker(*kernel, &result.driver_load);
  }
  // The worker replaced the module of this id, if it had one; so does this map.
  result.kernel = kernel.get();
  kernels_.insert_or_assign(id, std::move(kernel));
  return result;
}

void Service::unload(CodeId id) noexcept {
  const auto it = kernels_.find(id);
  if (it == kernels_.end()) return;
  if (pid_ > 0 && it->second->generation == generation_) {
    control_->id = id;
    if (post_and_wait(worker::Command::unload, std::chrono::seconds(5)) != Outcome::done) {
      std::string ignored;
      restart_worker(ignored);
    }
  }
  kernels_.erase(it);
}

std::optional<Error> Service::run(const Kernel& constant_kernel, std::byte* payload,
                                  std::size_t size, bool copy_back) noexcept {
  // Every Kernel is this service's own (kernels_): loading it again after a
  // restart is this service's business.
  auto& kernel = const_cast<Kernel&>(constant_kernel);
  try {
    if (pid_ <= 0) throw Error(errc::gpu_failed, "the GPU is unavailable: " + info_.why_not);
    if (size > max_payload_) {
      throw Error(errc::limit_exceeded, "a payload of " + std::to_string(size) +
                                            " bytes, over the GPU's payload buffer of " +
                                            std::to_string(max_payload_));
    }
    if (kernel.generation != generation_) [[unlikely]]
      load_in_worker(kernel, nullptr);
    if (size != 0) std::memcpy(payload_, payload, size);
    control_->id = kernel.id;
    control_->size = size;
    control_->copy_back = copy_back ? 1 : 0;
    const Outcome outcome = post_and_wait(worker::Command::run, options_.kernel_timeout);
    if (outcome == Outcome::done && control_->status == 0) [[likely]] {
      if (copy_back && size != 0) std::memcpy(payload, payload_, size);
      ++info_.kernels_run;
      return std::nullopt;
    }
    std::string why;
    if (outcome == Outcome::timed_out) {
      why = "GPU ifunc '" + kernel.name + "' ran longer than its " +
            std::to_string(options_.kernel_timeout.count()) +
            " ms (GpuOptions::kernel_timeout): its GPU worker was stopped";
    } else if (outcome == Outcome::died) {
      why = "GPU ifunc '" + kernel.name + "': the GPU worker process died while it ran";
    } else {
      why = control_->message;
    }
    const int status =
        outcome == Outcome::done ? control_->status : static_cast<int>(errc::gpu_failed);
    if (outcome != Outcome::done || control_->poisoned != 0) {
      // A worker that faulted exits once it said so (reaped here, if
      // post_and_wait has not); one that hangs is killed.
      if (outcome == Outcome::done && pid_ > 0) {
        (void)waitpid(pid_, nullptr, 0);
        pid_ = -1;
      }
      restart_worker(why);
    }
    return Error(static_cast<errc>(status), why);
  } catch (const Error& error) {
    return error;
  } catch (const std::exception& error) {
    return Error(errc::gpu_failed, "GPU ifunc '" + kernel.name + "': " + error.what());
  }
}

void Service::memory_context() {
  if (context_ == nullptr) {
    check(driver_.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  }
  check(driver_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

void Service::send_region(const Region& region) {
  control_->handle = region.handle;
  control_->offset = region.offset;
  control_->bytes = region.bytes;
  const Outcome outcome = post_and_wait(worker::Command::expose, std::chrono::seconds(30));
  if (outcome != Outcome::done || control_->status != 0) {
    throw Error(errc::gpu_failed, "exposing device region '" + region.name +
                                      "' to the GPU worker: " +
                                      (outcome == Outcome::done ? control_->message : "it died"));
  }
}

void Service::expose(const std::string& name, CUdeviceptr address, std::size_t bytes) {
  if (regions_.size() >= THREECHAINS_MAX_DEVICE_REGIONS) {
    throw Error(errc::limit_exceeded, "expose_device('" + name + "'): at most " +
                                          std::to_string(THREECHAINS_MAX_DEVICE_REGIONS) +
                                          " device regions");
  }
  memory_context();
  CUdeviceptr base = 0;
  std::size_t allocation = 0;
  check(driver_.cuMemGetAddressRange(&base, &allocation, address),
        ("expose_device('" + name + "'): not device memory of this process").c_str());
  if (address + bytes > base + allocation) {
    throw Error(errc::invalid_argument, "expose_device('" + name + "'): " + std::to_string(bytes) +
                                            " bytes run past the end of its allocation");
  }
  Region region;
  region.name = name;
  region.offset = static_cast<std::size_t>(address - base);
  region.bytes = bytes;
  check(driver_.cuIpcGetMemHandle(&region.handle, base),
        ("expose_device('" + name +
         "'): cuIpcGetMemHandle (memory from cuMemAlloc or cudaMalloc "
         "can be exposed)")
            .c_str());
  if (pid_ > 0) send_region(region);
  regions_.push_back(region);
}

CUdeviceptr Service::allocate(const std::string& name, std::size_t bytes) {
  memory_context();
  CUdeviceptr base = 0;
  check(driver_.cuMemAlloc(&base, std::max<std::size_t>(bytes, 1)),
        ("cuMemAlloc of " + std::to_string(bytes) + " bytes for '" + name + "'").c_str());
  try {
    expose(name, base, bytes);
  } catch (...) {
    (void)driver_.cuMemFree(base);
    throw;
  }
  regions_.back().owned = base;
  return base;
}

void Service::copy_to_device(CUdeviceptr to, const void* from, std::size_t bytes) {
  memory_context();
  check(driver_.cuMemcpyHtoD(to, from, bytes), "cuMemcpyHtoD");
}

void Service::copy_from_device(void* to, CUdeviceptr from, std::size_t bytes) {
  memory_context();
  check(driver_.cuMemcpyDtoH(to, from, bytes), "cuMemcpyDtoH");
}

}  // namespace threechains::gpu
