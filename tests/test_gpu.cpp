// GPU ifuncs (docs/gpu.md). The compile half (containers with NVPTX bitcode,
// PTX for a GPU architecture, imports) runs everywhere; the rest needs an
// NVIDIA GPU and its driver and says "SKIP: <why>" where there is none
// (scripts/gpu-check.sh runs it on the GPU machine).
#include "gpu/cuda_driver.hpp"
#include "gpu/ptx_compiler.hpp"
#include "jit/container_images.hpp"
#include "support/counter_target.hpp"
#include "support/mesh.hpp"
#include "support/temp_dir.hpp"
#include "support/two_process.hpp"

#include "../examples/gpu/field_sum.h"

#include <threechains/threechains.hpp>

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

using namespace threechains;
using namespace threechains::test;

namespace {

std::vector<std::byte> read_bytes(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

ParsedImage gpu_image_of(const char* container) {
  const std::vector<std::byte> bytes = read_bytes(container);
  for (ParsedImage& image : parse_container(bytes)) {
    if (is_gpu_triple(image.triple)) return std::move(image);
  }
  FAIL("no GPU image in " << container);
  return {};
}

// Whether this host has a GPU the driver opens. Asked in a child process:
// CUDA, like UCX, does not survive a fork, and the tests fork their targets.
bool gpu_here(std::string& why) {
  int out[2];
  if (pipe(out) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    std::string text;
    int rc = 1;
    try {
      const gpu::Driver& driver = gpu::Driver::get();
      int count = 0;
      const gpu::CUresult r = driver.cuDeviceGetCount(&count);
      if (r != gpu::CUDA_SUCCESS) {
        text = "cuDeviceGetCount: " + driver.describe(r);
      } else if (count == 0) {
        text = "the CUDA driver sees no GPU";
      } else {
        rc = 0;
      }
    } catch (const std::exception& e) {
      text = e.what();
    }
    (void)!write(out[1], text.data(), text.size());
    _exit(rc);
  }
  close(out[1]);
  char buffer[512] = {};
  const ssize_t n = read(out[0], buffer, sizeof(buffer) - 1);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  why.assign(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#define REQUIRE_GPU()                         \
  do {                                        \
    std::string why_not;                      \
    if (!gpu_here(why_not)) {                 \
      WARN("SKIP: no GPU here: " << why_not); \
      return;                                 \
    }                                         \
  } while (false)

std::optional<Error> carry_out(Channel& channel, const Ifunc& ifunc,
                               std::span<const std::byte> payload) {
  try {
    (void)channel.send_bytes(ifunc, payload);
    channel.flush();
    return std::nullopt;
  } catch (const Error& error) {
    return error;
  }
}

template <class T>
std::span<const std::byte> bytes_of(const T& value) {
  return std::as_bytes(std::span(&value, 1));
}

ReceiverOptions with_gpu(GpuOptions gpu = {}) {
  ReceiverOptions options;
  options.gpu = gpu;
  return options;
}

}  // namespace

TEST_CASE("GPU ifuncs: the container carries NVPTX bitcode compiled to PTX for the GPU's own arch",
          "[gpu][container]") {
  const ContainerInfo info = inspect_container(read_bytes(TC_GPU_SAXPY));
  REQUIRE(info.triples.size() == 1);
  CHECK(is_gpu_triple(info.triples.front()));
  CHECK(info.codec == CodecId::bitcode);
  // One source, CPU and GPU versions: both kinds of image, one codec.
  const ContainerInfo both = inspect_container(read_bytes(TC_FIELD_SUM));
  CHECK(both.triples.size() == 3);
  CHECK(both.codec == CodecId::bitcode);

  const ParsedImage image = gpu_image_of(TC_GPU_SAXPY);
  for (const char* arch : {"sm_90", "sm_80"}) {
    INFO(arch);
    const gpu::Ptx ptx = gpu::compile_ptx(image, {arch, 3, ""});
    CHECK(ptx.entry == "gpu_saxpy_main");
    CHECK_THAT(ptx.text, Catch::Contains(std::string(".target ") + arch));
    CHECK_THAT(ptx.text, Catch::Contains(".entry gpu_saxpy_main"));
    CHECK_THAT(ptx.text, Catch::Contains("ld.global"));   // it reads x, in global memory
    CHECK_THAT(ptx.text, Catch::Contains("fma.rn.f32"));  // a * x + y, fused
  }
  // The field sum's shared-memory tree and its one atomic per block.
  const gpu::Ptx sum = gpu::compile_ptx(gpu_image_of(TC_FIELD_SUM), {"sm_90", 3, ""});
  CHECK_THAT(sum.text, Catch::Contains(".shared"));
  CHECK_THAT(sum.text, Catch::Contains("barrier.sync"));
  CHECK_THAT(sum.text, Catch::Contains("atom.add.f64") && Catch::Contains("membar.gl"));
}

TEST_CASE("GPU ifuncs: what a GPU cannot resolve is refused and CPU images are not GPU code",
          "[gpu][container]") {
  try {
    (void)gpu::compile_ptx(gpu_image_of(TC_GPU_IMPORTS), {"sm_90", 3, ""});
    FAIL("a GPU image importing system() compiled");
  } catch (const Error& error) {
    CHECK(error.is(errc::import_refused));
    CHECK_THAT(error.what(), Catch::Contains("'system'") && Catch::Contains("libdevice"));
  }
  const std::vector<ParsedImage> counter = parse_container(read_bytes(TC_COUNTER_BITCODE));
  try {
    (void)gpu::compile_ptx(counter.front(), {"sm_90", 3, ""});
    FAIL("CPU bitcode compiled as GPU code");
  } catch (const Error& error) {
    CHECK(error.is(errc::bad_container));
    CHECK_THAT(error.what(), Catch::Contains("not NVPTX"));
  }
}

TEST_CASE("GPU ifuncs: a Receiver without a GPU refuses them with the reason and serves on",
          "[gpu][ucx]") {
  std::string why_not;
  if (gpu_here(why_not)) {
    WARN("SKIP: this host has a GPU (the GPU tests cover it)");
    return;
  }
  auto target = counter_target(Transport::shared_memory, nullptr, with_gpu());
  TestSource source(Transport::shared_memory, target.port());
  const Ifunc saxpy = Ifunc::load(TC_GPU_SAXPY);
  const float a = 2.0F;
  const std::optional<Error> error = carry_out(source.channel, saxpy, bytes_of(a));
  REQUIRE(error.has_value());
  CHECK(error->is(errc::gpu_failed));
  CHECK_THAT(error->what(), Catch::Contains("gpu_saxpy") && Catch::Contains("no GPU"));
  // The real cause, not only the prefix: no driver here (or none that starts).
  CHECK_THAT(error->what(), Catch::Contains("libcuda.so.1") || Catch::Contains("cuInit") ||
                                Catch::Contains("CUDA device"));
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const uint64_t increment = 5;
  CHECK_FALSE(carry_out(source.channel, counter, bytes_of(increment)).has_value());
  source.channel.close();
  const CounterResult result = target.result();
  CHECK(result.counter == 5);
  CHECK_THAT(result.first_error, Catch::Contains("no GPU"));
}

TEST_CASE("GPU ifuncs: GPU code from a signer trusted for confined code only is refused",
          "[gpu][trust][ucx]") {
  // Refused before anything of it is compiled or any GPU is asked: this runs
  // with a GPU or without.
  ReceiverOptions options = with_gpu();
  const PublicKey key = test_identity().public_key();
  options.trust = Trust().allow_peer(key).allow_code_signer(key);
  auto target = counter_target(Transport::shared_memory, nullptr, options);
  TestSource source(Transport::shared_memory, target.port());
  const float a = 2.0F;
  const std::optional<Error> error =
      carry_out(source.channel, Ifunc::load(TC_GPU_SAXPY), bytes_of(a));
  REQUIRE(error.has_value());
  CHECK(error->is(errc::code_refused));
  CHECK_THAT(error->what(), Catch::Contains("cannot be confined"));
  // Confined CPU code from the same signer runs.
  const uint64_t increment = 3;
  CHECK_FALSE(
      carry_out(source.channel, Ifunc::load(TC_COUNTER_BITCODE), bytes_of(increment)).has_value());
  source.channel.close();
  CHECK(target.result().counter == 3);
}

namespace {

struct SaxpyResult {
  uint64_t wrong;  // elements of y that are not what k saxpys make
  uint64_t kernels;
  char arch[16];
  char first_error[256];
};

constexpr std::size_t kElements = std::size_t{1} << 22;  // 16 MiB of floats each

}  // namespace

TEMPLATE_TEST_CASE("GPU ifuncs run on the target's GPU over the device memory it exposed",
                   "[gpu][ucx]", Shm, Tcp) {
  REQUIRE_GPU();
  constexpr int kCalls = 5;
  ChildTarget<SaxpyResult> target(
      TestType::transport,
      [](ChildContext& context) {
        Receiver& receiver = context.receiver;
        std::vector<float> x(kElements);
        std::vector<float> y(kElements);
        for (std::size_t i = 0; i < kElements; ++i) {
          x[i] = static_cast<float>(i % 1000);
          y[i] = 1.0F;
        }
        void* dx = receiver.allocate_device("x", kElements * sizeof(float));
        void* dy = receiver.allocate_device("y", kElements * sizeof(float));
        receiver.copy_to_device(dx, x.data(), kElements * sizeof(float));
        receiver.copy_to_device(dy, y.data(), kElements * sizeof(float));
        ChildTarget<SaxpyResult>::serve_until_closed(receiver, 1);
        receiver.copy_from_device(y.data(), dy, kElements * sizeof(float));
        SaxpyResult result{};
        for (std::size_t i = 0; i < kElements; ++i) {
          float expected = 1.0F;
          for (int k = 0; k < kCalls; ++k) expected = 2.0F * x[i] + expected;
          if (y[i] != expected) ++result.wrong;
        }
        const GpuInfo info = receiver.gpu_info();
        result.kernels = info.kernels_run;
        std::snprintf(result.arch, sizeof(result.arch), "%s", info.arch.c_str());
        context.first_error(result.first_error);
        return result;
      },
      // Over tcp every payload is copied into device memory; over shm the
      // kernel reads it in pinned host memory (both ways tested).
      with_gpu({.mapped_payload_max = std::is_same_v<TestType, Tcp> ? 0 : std::size_t{1} << 18}));
  TestSource source(TestType::transport, target.port(), options_for<TestType>());
  const Ifunc saxpy = Ifunc::load(TC_GPU_SAXPY);
  const float a = 2.0F;
  for (int k = 0; k < kCalls; ++k) {
    const std::optional<Error> error = carry_out(source.channel, saxpy, bytes_of(a));
    REQUIRE_FALSE(error.has_value());
  }
  source.channel.close();
  const SaxpyResult result = target.result();
  INFO(result.first_error);
  INFO("arch " << result.arch);
  CHECK(result.wrong == 0);
  CHECK(result.kernels == kCalls);
}

namespace {

struct FaultOrder {
  uint32_t what;
  uint32_t done;
  uint64_t address = 0;
};

struct FaultResult {
  uint64_t rebuilds;
  uint64_t kernels;
  uint64_t counter;
  uint64_t trapped;
  uint64_t region_wrong;  // elements of y the last saxpy (after the restarts) got wrong
  char first_error[256];
};

}  // namespace

TEST_CASE(
    "GPU ifuncs: a kernel fault and a timeout and PTX the driver rejects are reported "
    "while the Receiver serves on",
    "[gpu][ucx]") {
  REQUIRE_GPU();
  GpuOptions gpu;
  gpu.kernel_timeout = std::chrono::milliseconds(1000);
  ReceiverOptions options = with_gpu(gpu);
  options.limits.max_traps_per_code = 0;  // every fault is reported, none bans the code
  ChildTarget<FaultResult> target(
      Transport::shared_memory,
      [](ChildContext& context) {
        Receiver& receiver = context.receiver;
        receiver.set_target_args(&g_counter, sizeof(g_counter));
        // Device memory of this process: it outlives the worker's faults.
        constexpr std::size_t n = 4096;
        std::vector<float> x(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
        const std::vector<float> zeros(n, 0.0F);
        void* dx = receiver.allocate_device("x", n * sizeof(float));
        void* dy = receiver.allocate_device("y", n * sizeof(float));
        receiver.copy_to_device(dx, x.data(), n * sizeof(float));
        receiver.copy_to_device(dy, zeros.data(), n * sizeof(float));
        ChildTarget<FaultResult>::serve_until_closed(receiver, 1);
        std::vector<float> y(n);
        receiver.copy_from_device(y.data(), dy, n * sizeof(float));
        const GpuInfo info = receiver.gpu_info();
        FaultResult result{info.context_rebuilds,
                           info.kernels_run,
                           g_counter,
                           receiver.stats().code_trapped,
                           0,
                           {}};
        for (std::size_t i = 0; i < n; ++i) result.region_wrong += y[i] != x[i] ? 1 : 0;
        context.first_error(result.first_error);
        return result;
      },
      options);
  TestSource source(Transport::shared_memory, target.port());
  const Ifunc fault = Ifunc::load(TC_GPU_FAULT);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const uint64_t one = 1;
  uint64_t expected = 0;
  const auto honest_work_goes_on = [&] {
    CHECK_FALSE(carry_out(source.channel, fault, bytes_of(FaultOrder{0, 0})).has_value());
    CHECK_FALSE(carry_out(source.channel, counter, bytes_of(one)).has_value());
    ++expected;
  };
  honest_work_goes_on();

  std::optional<Error> error = carry_out(source.channel, fault, bytes_of(FaultOrder{1, 0}));
  REQUIRE(error.has_value());
  CHECK(error->is(errc::gpu_failed));
  CHECK_THAT(error->what(), Catch::Contains("gpu_fault") && Catch::Contains("ILLEGAL_ADDRESS") &&
                                Catch::Contains("started again"));
  honest_work_goes_on();

  error = carry_out(source.channel, fault, bytes_of(FaultOrder{2, 0}));
  REQUIRE(error.has_value());
  CHECK(error->is(errc::gpu_failed));
  CHECK_THAT(error->what(),
             Catch::Contains("longer than its 1000 ms") && Catch::Contains("started again"));
  honest_work_goes_on();

  const Ifunc bad_ptx = Ifunc::load(TC_GPU_BAD_PTX);
  error = carry_out(source.channel, bad_ptx, {});
  REQUIRE(error.has_value());
  CHECK(error->is(errc::gpu_failed));
  CHECK_THAT(error->what(),
             Catch::Contains("could not load its PTX") && Catch::Contains("driver's log"));
  honest_work_goes_on();

  // The regions this process exposed reach the third worker too.
  const Ifunc saxpy = Ifunc::load(TC_GPU_SAXPY);
  const float one_x = 1.0F;
  CHECK_FALSE(carry_out(source.channel, saxpy, bytes_of(one_x)).has_value());

  source.channel.close();
  const FaultResult result = target.result();
  INFO(result.first_error);
  CHECK(result.rebuilds == 2);
  CHECK(result.kernels == 5);  // the honest ones
  CHECK(result.counter == expected);
  CHECK(result.trapped == 2);
  CHECK(result.region_wrong == 0);
}

namespace {
struct CanaryResult {
  uint64_t canary_changed;  // bytes of the canary that are not what the target wrote
  uint64_t counter;
  char first_error[256];
};
}  // namespace

// The attacker: a signed GPU ifunc told the device address of memory the
// target application allocated and did not expose, and told to overwrite it.
// Kernels run in the GPU worker's own context, where that address means
// nothing of the application's: the store faults (or lands in the worker's
// own memory); the canary stays, and the Receiver serves on. (Kernels run in
// the Receiver's own process, as the first version ran them, would have
// zeroed it.)
TEST_CASE("GPU ifuncs: a kernel reaches no device memory of the target's that it was not given",
          "[gpu][ucx][trust]") {
  REQUIRE_GPU();
  const TempDir dir("tc-gpu-canary");
  const std::string address_file = (dir.path() / "canary").string();
  constexpr std::size_t kCanary = 4096;
  ChildTarget<CanaryResult> target(
      Transport::shared_memory,
      [&address_file](ChildContext& context) {
        Receiver& receiver = context.receiver;
        receiver.set_target_args(&g_counter, sizeof(g_counter));
        // An exposed region (it also makes this thread's context current),
        // and the canary: allocated here, never exposed.
        (void)receiver.allocate_device("exposed", 64);
        const gpu::Driver& driver = gpu::Driver::get();
        gpu::CUdeviceptr canary = 0;
        if (driver.cuMemAlloc(&canary, kCanary) != gpu::CUDA_SUCCESS)
          throw std::runtime_error("cuMemAlloc of the canary");
        std::vector<unsigned char> pattern(kCanary);
        for (std::size_t i = 0; i < kCanary; ++i)
          pattern[i] = static_cast<unsigned char>(i * 13 + 7);
        void* canary_address = reinterpret_cast<void*>(static_cast<uintptr_t>(canary));
        receiver.copy_to_device(canary_address, pattern.data(), kCanary);
        std::ofstream(address_file) << canary;
        context.ack();
        ChildTarget<CanaryResult>::serve_until_closed(receiver, 1);
        std::vector<unsigned char> now(kCanary);
        receiver.copy_from_device(now.data(), canary_address, kCanary);
        CanaryResult result{0, g_counter, {}};
        for (std::size_t i = 0; i < kCanary; ++i)
          result.canary_changed += now[i] != pattern[i] ? 1 : 0;
        context.first_error(result.first_error);
        return result;
      },
      with_gpu());
  REQUIRE(target.wait_for_ack(std::chrono::seconds(60)));
  uint64_t canary = 0;
  std::ifstream(address_file) >> canary;
  REQUIRE(canary != 0);
  TestSource source(Transport::shared_memory, target.port());
  const Ifunc fault = Ifunc::load(TC_GPU_FAULT);
  const std::optional<Error> attack =
      carry_out(source.channel, fault, bytes_of(FaultOrder{3, 0, canary}));
  if (attack) {  // the usual outcome: nothing is mapped there in the worker
    CHECK(attack->is(errc::gpu_failed));
    CHECK_THAT(attack->what(), Catch::Contains("started again"));
  }
  // Honest work after it: GPU and CPU.
  CHECK_FALSE(carry_out(source.channel, fault, bytes_of(FaultOrder{0, 0})).has_value());
  const uint64_t one = 1;
  CHECK_FALSE(
      carry_out(source.channel, Ifunc::load(TC_COUNTER_BITCODE), bytes_of(one)).has_value());
  source.channel.close();
  const CanaryResult result = target.result();
  INFO(result.first_error);
  CHECK(result.canary_changed == 0);
  CHECK(result.counter == 1);
}

namespace {
struct FieldReport {
  uint64_t kernels;
  char first_error[256];
};
inline field_sum g_answer{};
}  // namespace

TEST_CASE("GPU ifuncs: the host part sends the GPU's answer back (field_sum over a Node mesh)",
          "[gpu][ucx][node]") {
  REQUIRE_GPU();
  constexpr std::size_t kField = std::size_t{1} << 20;
  NodeOptions options;
  options.receiver.gpu = GpuOptions{};
  Mesh<FieldReport> mesh(
      2, Transport::shared_memory,
      [](Node& node) {
        node.expose("field_sum_answer", &g_answer);
        if (node.rank() != 1) return;
        std::vector<float> field(kField);
        for (std::size_t i = 0; i < kField; ++i) field[i] = static_cast<float>(i % 7);
        void* device = node.receiver().allocate_device("field", kField * sizeof(float));
        node.receiver().copy_to_device(device, field.data(), kField * sizeof(float));
        const field_sum_scratch zero{};
        void* scratch = node.receiver().allocate_device("scratch", sizeof(zero));
        node.receiver().copy_to_device(scratch, &zero, sizeof(zero));
      },
      [](Node& node, int commands) {
        Mesh<FieldReport>::serve_until_told(node, commands);
        FieldReport report{node.receiver().gpu_info().kernels_run, {}};
        return report;
      },
      options);
  const Ifunc field_sum = Ifunc::load(TC_FIELD_SUM);
  double expected = 0;
  for (std::size_t i = 0; i < kField; ++i) expected += static_cast<double>(i % 7);
  for (uint32_t sequence = 1; sequence <= 3; ++sequence) {
    const struct field_sum request { FIELD_SUM_REQUEST, sequence, 0, 0.0, 0 };
    mesh.node().send(1, field_sum, request);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (g_answer.sequence != sequence && std::chrono::steady_clock::now() < deadline)
      (void)mesh.node().poll();
    REQUIRE(g_answer.sequence == sequence);
    CHECK(g_answer.phase == FIELD_SUM_ANSWER);
    CHECK(g_answer.elements == kField);
    CHECK(g_answer.sum == Approx(expected).epsilon(1e-12));
  }
  const std::vector<FieldReport> reports = mesh.finish();
  REQUIRE(reports.size() == 1);
  CHECK(reports.front().kernels == 3);
}
