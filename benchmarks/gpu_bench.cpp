// threechains-bench-gpu: GPU ifuncs beside their natural baselines, in one run
// (docs/performance.md, "GPU ifuncs"):
//  - first call: LLVM (bitcode to PTX) + the driver's PTX JIT, against loading
//    the same kernel built by nvcc as a cubin (--cubin);
//  - saxpy over a device field (default 1 GiB per vector): the ifunc's kernel
//    against nvcc -O3's, same grid, same launch;
//  - a cached kernel's launch-and-complete through the executor, against a
//    plain cuLaunchKernel + wait of the same PTX;
//  - payload bytes/s host to GPU, mapped pinned memory against a copy into
//    device memory, against a pinned cuMemcpyHtoD (the copy engine's peak);
//  - the round trip of a GPU ifunc through a Receiver (shm), against a CPU
//    ifunc's on the same channel: the network's share.
// Without a GPU it says why and exits 0.
#include "bench_util.hpp"
#include "gpu/executor.hpp"
#include "gpu/gpu_service.hpp"
#include "jit/container_images.hpp"

#include <threechains/threechains.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace tc = threechains;
namespace gpu = threechains::gpu;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tc::Error(tc::errc::io, "cannot read '" + path + "'");
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

tc::ParsedImage gpu_image(const std::string& container) {
  for (tc::ParsedImage& image : tc::parse_container(read_bytes(container))) {
    if (tc::is_gpu_triple(image.triple)) return std::move(image);
  }
  throw tc::Error(tc::errc::bad_container, container + " has no GPU image");
}

double us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

void check(const gpu::Driver& d, gpu::CUresult r, const char* what) {
  if (r != gpu::CUDA_SUCCESS)
    throw tc::Error(tc::errc::gpu_failed, std::string(what) + ": " + d.describe(r));
}

// A kernel launched by hand, as a CUDA program would: the baseline.
struct RawKernel {
  gpu::CUmodule module = nullptr;
  gpu::CUfunction function = nullptr;
  unsigned grid = 0;
};

RawKernel raw_kernel(const gpu::Driver& d, const void* image, int multiprocessors) {
  RawKernel k;
  check(d, d.cuModuleLoadDataEx(&k.module, image, 0, nullptr, nullptr), "cuModuleLoadDataEx");
  check(d, d.cuModuleGetFunction(&k.function, k.module, "gpu_saxpy_main"), "cuModuleGetFunction");
  int per = 1;
  (void)d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per, k.function, THREECHAINS_GPU_THREADS, 0);
  k.grid = static_cast<unsigned>(std::max(per, 1) * multiprocessors);
  return k;
}

// Median time of `n` calls of `once` (after 3 warm-ups).
template <class F>
double median_us(int n, F&& once) {
  for (int i = 0; i < 3; ++i) once();
  std::vector<double> t;
  t.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    once();
    t.push_back(us(Clock::now() - start));
  }
  return bench::median(t);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPU ifuncs against their baselines"};
  std::string cubin;
  std::string json_path;
  std::size_t field_mib = 1024;
  int iterations = 2000;
  bool keep_driver_cache = false;
  app.add_option("--cubin", cubin, "the saxpy kernel built by nvcc -O3 -cubin (the baseline)");
  app.add_option("--json", json_path, "write the figures here");
  app.add_option("--field-mib", field_mib, "MiB per saxpy vector (x and y)");
  app.add_option("--iterations", iterations, "timed calls per latency figure");
  app.add_flag("--driver-cache", keep_driver_cache,
               "let the driver keep its PTX JIT cache (default: off, so a first call JITs)");
  CLI11_PARSE(app, argc, argv);
  // Before the driver starts: every first load really JITs.
  if (!keep_driver_cache) setenv("CUDA_CACHE_DISABLE", "1", 1);

  std::string json = "{";
  const auto put = [&](const std::string& key, double value) {
    json += fmt::format("{}\"{}\": {:.4f}", json.size() > 1 ? ", " : "", key, value);
  };
  try {
    constexpr std::size_t kMaxPayload = std::size_t{64} << 20;
    tc::GpuOptions mapped_options;
    mapped_options.mapped_payload_max = kMaxPayload;
    gpu::Executor ex(mapped_options, kMaxPayload);
    const gpu::Driver& d = ex.driver();
    const tc::GpuInfo& info = ex.info();
    fmt::print("GPU: {} ({}, {} SMs), driver {}\n", info.name, info.arch, info.multiprocessors,
               info.driver_version);
    json += fmt::format("\"gpu\": \"{}\", \"arch\": \"{}\"", info.name, info.arch);

    // 1. First call.
    const tc::ParsedImage saxpy_image = gpu_image(THREECHAINS_GPU_SAXPY);
    auto started = Clock::now();
    gpu::Ptx ptx = gpu::compile_ptx(saxpy_image, {info.arch, 3, ""});
    const double compile_us = us(Clock::now() - started);
    const std::string ptx_text = ptx.text;
    const gpu::KernelLoad ours = ex.load_ptx(1, "gpu_saxpy", std::move(ptx));
    const double jit_us = us(ours.driver_load);
    fmt::print(
        "\nfirst call of saxpy (no caches):\n  LLVM bitcode->PTX {:9.1f} us\n"
        "  driver PTX JIT    {:9.1f} us\n  together          {:9.1f} us\n",
        compile_us, jit_us, compile_us + jit_us);
    put("first_llvm_us", compile_us);
    put("first_driver_jit_us", jit_us);
    std::vector<std::byte> cubin_bytes;
    RawKernel nvcc;
    if (!cubin.empty()) {
      cubin_bytes = read_bytes(cubin);
      started = Clock::now();
      nvcc = raw_kernel(d, cubin_bytes.data(), info.multiprocessors);
      const double cubin_us = us(Clock::now() - started);
      fmt::print("  nvcc cubin load   {:9.1f} us  (ours / cubin: {:.1f}x)\n", cubin_us,
                 (compile_us + jit_us) / cubin_us);
      put("first_cubin_load_us", cubin_us);
    }

    // 2. saxpy over the field.
    const std::size_t bytes = field_mib << 20;
    // The benchmark's own memory (the executor's context is current here),
    // exposed to the kernel as a Receiver's application would.
    gpu::CUdeviceptr x = 0;
    gpu::CUdeviceptr y = 0;
    check(d, d.cuMemAlloc(&x, bytes), "cuMemAlloc (x)");
    check(d, d.cuMemAlloc(&y, bytes), "cuMemAlloc (y)");
    ex.expose("x", x, bytes);
    ex.expose("y", y, bytes);
    check(d, d.cuMemsetD8(x, 0, bytes), "cuMemsetD8");
    check(d, d.cuMemsetD8(y, 0, bytes), "cuMemsetD8");
    float a = 2.0F;
    std::byte payload[64] = {};
    std::memcpy(payload, &a, sizeof(a));
    const int field_iterations = 20;
    const double ours_us = median_us(field_iterations, [&] {
      if (auto e = ex.run(*ours.kernel, payload, sizeof(a), false)) throw *e;
    });
    const double moved = 3.0 * static_cast<double>(bytes);  // x read, y read and written
    fmt::print(
        "\nsaxpy over {} MiB vectors (median of {}):\n  ifunc (LLVM PTX)  {:9.1f} us "
        "{:7.0f} GB/s\n",
        field_mib, field_iterations, ours_us, moved / ours_us / 1e3);
    put("saxpy_ifunc_us", ours_us);
    put("saxpy_ifunc_gbs", moved / ours_us / 1e3);
    if (nvcc.function != nullptr) {
      // The same launch the executor makes, on its stream, with its payload
      // address and region table: only the code differs.
      gpu::CUdeviceptr a_device = 0;
      check(d, d.cuMemAlloc(&a_device, 64), "cuMemAlloc");
      check(d, d.cuMemcpyHtoD(a_device, &a, sizeof(a)), "cuMemcpyHtoD");
      gpu::CUdeviceptr table = 0;
      threechains_device_regions regions{};
      regions.count = 2;
      regions.region[0] = {reinterpret_cast<void*>(x), bytes};
      regions.region[1] = {reinterpret_cast<void*>(y), bytes};
      check(d, d.cuMemAlloc(&table, sizeof(regions)), "cuMemAlloc");
      check(d, d.cuMemcpyHtoD(table, &regions, sizeof(regions)), "cuMemcpyHtoD");
      uint64_t size = sizeof(a);
      void* args[] = {&a_device, &size, &table};
      const double nvcc_us = median_us(field_iterations, [&] {
        check(d,
              d.cuLaunchKernel(nvcc.function, nvcc.grid, 1, 1, THREECHAINS_GPU_THREADS, 1, 1, 0,
                               ex.stream(), args, nullptr),
              "cuLaunchKernel");
        check(d, d.cuStreamSynchronize(ex.stream()), "cuStreamSynchronize");
      });
      fmt::print(
          "  nvcc -O3 cubin    {:9.1f} us {:7.0f} GB/s\n  ifunc / nvcc bandwidth: {:.3f}x "
          "(goal >= 0.95x)\n",
          nvcc_us, moved / nvcc_us / 1e3, nvcc_us / ours_us);
      put("saxpy_nvcc_us", nvcc_us);
      put("saxpy_nvcc_gbs", moved / nvcc_us / 1e3);
      put("saxpy_ifunc_over_nvcc_bandwidth", nvcc_us / ours_us);
      (void)d.cuMemFree(a_device);
      (void)d.cuMemFree(table);
    }

    // 3. A cached kernel's launch-and-complete, 16-byte payload.
    const tc::ParsedImage touch_image = gpu_image(THREECHAINS_GPU_TOUCH);
    const gpu::KernelLoad touch =
        ex.load_ptx(2, "gpu_touch", gpu::compile_ptx(touch_image, {info.arch, 3, ""}));
    const double run_us = median_us(iterations, [&] {
      if (auto e = ex.run(*touch.kernel, payload, 16, false)) throw *e;
    });
    RawKernel plain;
    plain.module = touch.kernel->module;
    plain.function = touch.kernel->function;
    gpu::CUdeviceptr small = 0;
    check(d, d.cuMemAlloc(&small, 64), "cuMemAlloc");
    uint64_t small_size = 16;
    gpu::CUdeviceptr no_regions = 0;
    void* touch_args[] = {&small, &small_size, &no_regions};
    const auto launch = [&] {
      check(d,
            d.cuLaunchKernel(plain.function, touch.kernel->grid, 1, 1, THREECHAINS_GPU_THREADS, 1,
                             1, 0, ex.stream(), touch_args, nullptr),
            "cuLaunchKernel");
    };
    const double sync_us = median_us(iterations, [&] {
      launch();
      check(d, d.cuStreamSynchronize(ex.stream()), "cuStreamSynchronize");
    });
    const double spin_us = median_us(iterations, [&] {
      launch();
      gpu::CUresult r;
      while ((r = d.cuStreamQuery(ex.stream())) == gpu::CUDA_ERROR_NOT_READY) {
      }
      check(d, r, "cuStreamQuery");
    });
    const double plain_us = std::min(sync_us, spin_us);
    fmt::print(
        "\ncached launch and complete, 16 B payload (median of {}):\n"
        "  executor (copy in, launch, wait)  {:7.2f} us\n"
        "  plain cuLaunchKernel + sync       {:7.2f} us\n"
        "  plain cuLaunchKernel + query spin {:7.2f} us\n  executor / plain: {:.2f}x\n",
        iterations, run_us, sync_us, spin_us, run_us / plain_us);
    put("launch_executor_us", run_us);
    put("launch_plain_sync_us", sync_us);
    put("launch_plain_spin_us", spin_us);

    // 4. Payload bytes/s host to GPU, as a Receiver's GPU moves them (its
    // worker process, its shared payload area): mapped, or copied.
    const auto service_for = [&](std::size_t mapped_max) {
      tc::GpuOptions service_options;
      service_options.mapped_payload_max = mapped_max;
      return std::make_unique<gpu::Service>(service_options, kMaxPayload, "");
    };
    const auto mapped_service = service_for(kMaxPayload);
    const auto copying_service = service_for(0);
    const gpu::Service::Kernel& touch_mapped = *mapped_service->load(3, touch_image).kernel;
    const gpu::Service::Kernel& touch_copied = *copying_service->load(3, touch_image).kernel;
    fmt::print("\nthe Receiver's GPU worker (payload area pinned: {}):\n",
               mapped_service->info().payload_pinned ? "yes" : "no");
    const double service_us = median_us(iterations, [&] {
      if (auto e = mapped_service->run(touch_mapped, payload, 16, false)) throw *e;
    });
    fmt::print("  launch and complete, 16 B     {:7.2f} us ({:.2f}x plain)\n", service_us,
               service_us / plain_us);
    put("launch_worker_us", service_us);
    void* pinned = nullptr;
    check(d, d.cuMemHostAlloc(&pinned, kMaxPayload, 0), "cuMemHostAlloc");
    gpu::CUdeviceptr target = 0;
    check(d, d.cuMemAlloc(&target, kMaxPayload), "cuMemAlloc");
    std::vector<std::byte> big(kMaxPayload, std::byte{1});
    fmt::print(
        "\npayload host->GPU through the worker (touch kernel reads every word; GB/s):\n"
        "  {:>9} {:>9} {:>9} {:>12}\n",
        "bytes", "mapped", "copied", "pinned HtoD");
    for (std::size_t size = 4096; size <= kMaxPayload; size *= 4) {
      const int n = size <= (std::size_t{1} << 20) ? 500 : 20;
      const double mapped = median_us(n, [&] {
        if (auto e = mapped_service->run(touch_mapped, big.data(), size, false)) throw *e;
      });
      const double copied = median_us(n, [&] {
        if (auto e = copying_service->run(touch_copied, big.data(), size, false)) throw *e;
      });
      const double peak = median_us(n, [&] {
        check(d, d.cuMemcpyHtoDAsync(target, pinned, size, ex.stream()), "cuMemcpyHtoDAsync");
        check(d, d.cuStreamSynchronize(ex.stream()), "cuStreamSynchronize");
      });
      const auto gbs = [&](double t) { return static_cast<double>(size) / t / 1e3; };
      fmt::print("  {:>9} {:9.2f} {:9.2f} {:12.2f}\n", size, gbs(mapped), gbs(copied), gbs(peak));
      put(fmt::format("payload_{}_mapped_gbs", size), gbs(mapped));
      put(fmt::format("payload_{}_copied_gbs", size), gbs(copied));
      put(fmt::format("payload_{}_pinned_htod_gbs", size), gbs(peak));
    }
    (void)d.cuMemFreeHost(pinned);
    (void)d.cuMemFree(target);
    (void)d.cuMemFree(small);
    (void)d.cuMemFree(x);
    (void)d.cuMemFree(y);

    // 5. Through a Receiver: a GPU ifunc's round trip against a CPU ifunc's.
    const tc::KeyPair key = tc::KeyPair::load(THREECHAINS_DEV_KEY);
    tc::ReceiverOptions options;
    options.trust =
        tc::Trust().allow_peer(key.public_key()).allow_native_code_signer(key.public_key());
    options.gpu = tc::GpuOptions{};
    uint64_t counter = 0;
    options.target_args = &counter;
    options.target_args_bytes = sizeof(counter);
    tc::Worker target_worker{tc::Context({.transport = tc::Transport::shared_memory})};
    tc::Receiver receiver(target_worker, options);
    receiver.start();
    tc::Worker source_worker{tc::Context({.transport = tc::Transport::shared_memory})};
    tc::Source source(source_worker);
    tc::ChannelOptions channel_options;
    channel_options.identity = key;
    tc::Channel channel = source.connect("127.0.0.1", receiver.port(), channel_options);
    const tc::Ifunc gpu_touch = tc::Ifunc::load(THREECHAINS_GPU_TOUCH);
    const tc::Ifunc cpu_counter = tc::Ifunc::load(THREECHAINS_COUNTER);
    const std::span<const std::byte> sixteen(payload, 16);
    started = Clock::now();
    (void)channel.send_bytes(gpu_touch, sixteen);
    channel.flush();
    const double first_rt = us(Clock::now() - started);
    const double gpu_rt = median_us(iterations, [&] {
      (void)channel.send_bytes(gpu_touch, sixteen);
      channel.flush();
    });
    const double cpu_rt = median_us(iterations, [&] {
      (void)channel.send_bytes(cpu_counter, std::span<const std::byte>(payload, 8));
      channel.flush();
    });
    channel.close();
    receiver.stop();
    const double goal = 1.3 * plain_us + cpu_rt;
    fmt::print(
        "\nthrough a Receiver over shm (send + flush, median of {}):\n"
        "  first GPU ifunc call      {:9.1f} us (code sent, LLVM, driver JIT, run)\n"
        "  cached GPU ifunc          {:9.2f} us\n  cached CPU ifunc          {:9.2f} us\n"
        "  GPU - CPU ifunc           {:9.2f} us against plain launch {:.2f} us: {:.2f}x\n"
        "  goal: GPU ifunc <= 1.3 x plain launch + CPU round trip = {:.2f} us: {}\n",
        iterations, first_rt, gpu_rt, cpu_rt, gpu_rt - cpu_rt, plain_us,
        (gpu_rt - cpu_rt) / plain_us, goal, gpu_rt <= goal ? "met" : "missed");
    put("receiver_first_gpu_call_us", first_rt);
    put("receiver_gpu_rt_us", gpu_rt);
    put("receiver_cpu_rt_us", cpu_rt);
    put("receiver_goal_us", goal);
  } catch (const tc::Error& error) {
    if (error.is(tc::errc::gpu_failed) && json.size() == 1) {
      fmt::print("SKIP: no GPU: {}\n", error.what());
      return 0;
    }
    fmt::print(stderr, "threechains-bench-gpu: {}\n", error.what());
    return 1;
  }
  json += "}\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}
