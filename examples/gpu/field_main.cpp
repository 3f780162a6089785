// threechains-gpu-field: a source ships a reduction to a target that holds a
// field in GPU memory and gets the sum back (docs/gpu.md). Two ranks of a
// Node mesh, forked here: rank 1 exposes a field of floats in its GPU's
// memory; rank 0 sends field_sum (examples/gpu/field_sum.c) there. Its kernel
// sums the field on rank 1's GPU, its host part sends the answer back to
// rank 0, where its CPU part records it. Prints the first call (code sent,
// compiled by LLVM for the GPU, loaded by the driver, run), the cached round
// trip and the field's bandwidth, and checks every answer. Without a GPU it
// says why and exits 0.
#include "field_sum.h"

#include <threechains/threechains.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace tc = threechains;
using Clock = std::chrono::steady_clock;

namespace {

field_sum g_answer{};  // field_sum_main writes answers here (exposed "field_sum_answer")

void write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n <= 0) throw std::runtime_error("pipe write");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void read_all(int fd, void* data, std::size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = read(fd, p, size);
    if (n <= 0) throw std::runtime_error("pipe read");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

tc::NodeOptions mesh_options(bool gpu) {
  const tc::KeyPair key = tc::KeyPair::load(THREECHAINS_DEV_KEY);
  tc::NodeOptions options;
  options.receiver.trust =
      tc::Trust().allow_peer(key.public_key()).allow_native_code_signer(key.public_key());
  options.channel.identity = key;
  if (gpu) options.receiver.gpu = tc::GpuOptions{};
  return options;
}

// Rank 1: the field in GPU memory, served until rank 0 says done.
int field_rank(tc::Transport transport, std::size_t elements, int up, int down) {
  tc::Node node(tc::Worker(tc::Context({.transport = transport})), 1, 2, mesh_options(true));
  const tc::GpuInfo info = node.receiver().gpu_info();
  int32_t ready = info.available ? 1 : 0;
  write_all(up, &ready, sizeof(ready));
  if (!info.available) {
    fmt::print("SKIP: no GPU on the target: {}\n", info.why_not);
    std::fflush(stdout);
    return 0;
  }
  fmt::print("target: {} ({}, {} SMs, driver {}), field of {} floats in its memory\n", info.name,
             info.arch, info.multiprocessors, info.driver_version, elements);
  std::fflush(stdout);
  std::vector<float> field(elements);
  for (std::size_t i = 0; i < elements; ++i) field[i] = static_cast<float>(i % 7);
  node.expose("field_sum_answer", &g_answer);
  void* device = node.receiver().allocate_device("field", elements * sizeof(float));
  node.receiver().copy_to_device(device, field.data(), elements * sizeof(float));
  const field_sum_scratch zero{};
  void* scratch = node.receiver().allocate_device("scratch", sizeof(zero));
  node.receiver().copy_to_device(scratch, &zero, sizeof(zero));
  const uint16_t port = node.port();
  write_all(up, &port, sizeof(port));
  uint16_t ports[2];
  read_all(down, ports, sizeof(ports));
  node.connect({{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}});
  node.run([&] {
    pollfd p{down, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  });
  node.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Ship a reduction to a field in a target's GPU memory; get the sum back"};
  std::size_t elements = std::size_t{64} << 20;
  int calls = 200;
  std::string transport_name = "shm";
  app.add_option("--elements", elements, "floats in the field (default 64 Mi: 256 MiB)");
  app.add_option("--calls", calls, "cached calls timed after the first");
  app.add_option("--transport", transport_name, "shm or tcp")->check(CLI::IsMember({"shm", "tcp"}));
  CLI11_PARSE(app, argc, argv);
  const tc::Transport transport =
      transport_name == "tcp" ? tc::Transport::tcp : tc::Transport::shared_memory;

  int up[2];
  int down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return 1;
  // Before any UCX or CUDA state exists here: neither survives a fork.
  const pid_t child = fork();
  if (child == 0) {
    close(up[0]);
    close(down[1]);
    try {
      _exit(field_rank(transport, elements, up[1], down[0]));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "field rank: %s\n", e.what());
      _exit(1);
    }
  }
  close(up[1]);
  close(down[0]);
  int rc = 0;
  try {
    int32_t ready = 0;
    read_all(up[0], &ready, sizeof(ready));
    if (ready == 0) {
      int status = 0;
      waitpid(child, &status, 0);
      return 0;  // the target said why
    }
    uint16_t ports[2];
    read_all(up[0], &ports[1], sizeof(uint16_t));
    tc::Node node(tc::Worker(tc::Context({.transport = transport})), 0, 2, mesh_options(false));
    node.expose("field_sum_answer", &g_answer);
    ports[0] = node.port();
    write_all(down[1], ports, sizeof(ports));
    node.connect({{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}});
    const tc::Ifunc field_sum_ifunc = tc::Ifunc::load(THREECHAINS_FIELD_SUM);
    double expected = 0;
    for (std::size_t i = 0; i < elements; ++i) expected += static_cast<double>(i % 7);
    std::vector<double> cached_us;
    double first_us = 0;
    int wrong = 0;
    for (int k = 0; k <= calls; ++k) {
      const uint32_t sequence = static_cast<uint32_t>(k + 1);
      const field_sum request{FIELD_SUM_REQUEST, sequence, 0, 0.0, 0};
      const auto started = Clock::now();
      node.send(1, field_sum_ifunc, request);
      const auto deadline = started + std::chrono::seconds(60);
      while (g_answer.sequence != sequence) {
        if (Clock::now() > deadline) throw std::runtime_error("no answer within 60 s");
        (void)node.poll();
      }
      const double t = std::chrono::duration<double, std::micro>(Clock::now() - started).count();
      (k == 0 ? first_us : cached_us.emplace_back(t)) = t;
      if (g_answer.elements != elements || std::fabs(g_answer.sum - expected) > 1e-9 * expected)
        ++wrong;
    }
    std::sort(cached_us.begin(), cached_us.end());
    const double median = cached_us.empty() ? 0 : cached_us[cached_us.size() / 2];
    const double bytes = static_cast<double>(elements * sizeof(float));
    fmt::print("field_sum over {}: sum {} of {} elements ({} expected)\n", transport_name,
               g_answer.sum, g_answer.elements, expected);
    fmt::print("  first call  {:10.1f} us  (code sent, LLVM -> PTX, driver JIT, kernel, answer)\n",
               first_us);
    fmt::print("  cached call {:10.1f} us  median of {} round trips: {:.0f} GB/s of field\n",
               median, calls, bytes / median / 1e3);
    fmt::print("  answers wrong: {}\n", wrong);
    rc = wrong == 0 ? 0 : 1;
    const char done = 'q';
    write_all(down[1], &done, 1);
    node.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "threechains-gpu-field: %s\n", e.what());
    rc = 1;
    kill(child, SIGKILL);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  return rc;
}
