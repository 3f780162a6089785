// threechains-bench-jit: what turning a code section into an entry point costs
// on this host — the very first load in a process (JIT start-up included), and
// then repeated loads of code the JIT no longer holds (evict, load again), for
// each container given. Prints a table and one JSON line per container; then,
// side by side in the same process, the research prototype's way of loading
// (dlopen + dlsym of the counter built as a shared object, from tmpfs) against
// the binary counter, and a stock ORC LLJIT against the bitcode counter.
#include "load_baselines.hpp"

#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>
#include <threechains/trust.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <thread>
#include <vector>

namespace tc = threechains;

int main(int argc, char** argv) {
  CLI::App app{"Measure JIT compile (bitcode) and link (binary) time of ifunc containers"};
  std::vector<std::string> containers;
  int repeats = 50;
  int codegen_level = 2;
  int optimisation_level = 2;
  std::string dump_objects_to;
  std::string code_cache_directory;
  bool wait_for_tier1 = false;
  std::string compile_between;
  int gap_ms = 0;
  std::string shared_object = THREECHAINS_BENCH_COUNTER_SO;
  std::string binary_counter = THREECHAINS_BENCH_BINARY;
  std::string prelinked_counter = THREECHAINS_BENCH_PRELINKED;
  std::string bitcode_counter = THREECHAINS_BENCH_BITCODE;
  std::string counter_ir = THREECHAINS_BENCH_COUNTER_BC;
  app.add_option("containers", containers, ".tcc files")->required();
  app.add_option("-r,--repeats", repeats, "evict + load rounds per container");
  app.add_option("-O,--codegen-level", codegen_level, "JIT codegen level 0..3");
  app.add_option("--optimisation-level", optimisation_level,
                 "middle-end pipeline on bitcode: 0 none, 1..3 O1..O3");
  app.add_option("--dump-objects", dump_objects_to,
                 "write every object the JIT links to this directory (to disassemble)");
  app.add_option("--code-cache", code_cache_directory,
                 "persistent code cache directory: after the first load, bitcode is linked "
                 "from it (what a restarted target pays)");
  app.add_flag("--wait-for-tier1", wait_for_tier1,
               "tiered containers: after each load, call until tier 1 is due and wait for it "
               "(loads are still what is timed)");
  app.add_option("--compile-between", compile_between,
                 "a bitcode container another JitCache compiles before each timed load "
                 "(untimed): loads with caches a compile has just used");
  app.add_option("--shared-object", shared_object,
                 "the counter as a shared object, for the dlopen baseline (\"\": none)");
  app.add_option("--stock-bitcode", counter_ir,
                 "the counter's bitcode for this host, for the stock LLJIT baseline (\"\": none)");
  app.add_option("--gap-ms", gap_ms,
                 "sleep this long before each timed load and signature check: what a first "
                 "call finds on a target that was idle (caches cold), as threechains-bench's "
                 "first-call rounds do");
  app.add_option("--prelinked", prelinked_counter,
                 "the counter packed PRELINKED: its load, the binary one and dlopen take turns "
                 "(\"\": none)");
  CLI11_PARSE(app, argc, argv);
  std::optional<tc::Ifunc> polluter;
  if (!compile_between.empty()) polluter.emplace(tc::Ifunc::load(compile_between));
  tc::JitCache other_jit;
  std::map<std::string, double> median_of;  // container path (canonical) -> median load (us)
  binary_counter = std::filesystem::weakly_canonical(binary_counter).string();
  bitcode_counter = std::filesystem::weakly_canonical(bitcode_counter).string();

  tc::JitCache cache({.optimisation_level = optimisation_level,
                      .codegen_level = codegen_level,
                      .dump_objects_to = dump_objects_to,
                      .code_cache_directory = code_cache_directory});
  fmt::print("{:<40} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "container", "codec", "bytes",
             "first ms", "median us", "min us", "verify us");
  for (const std::string& path : containers) {
    const tc::Ifunc ifunc = tc::Ifunc::load(path);
    const auto first = cache.load(ifunc.id(), ifunc.codec(), ifunc.code()).compile_time;
    std::vector<double> rounds;
    for (int i = 0; i < repeats; ++i) {
      (void)cache.evict(ifunc.id());
      if (gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
      if (polluter) {
        // Another JIT compiles something first (untimed), as a tier-1
        // compile would beside the dispatch loop: what does that leave the
        // next load?
        (void)other_jit.evict(polluter->id());
        (void)other_jit.load(polluter->id(), polluter->codec(), polluter->code());
      }
      rounds.push_back(std::chrono::duration<double, std::micro>(
                           cache.load(ifunc.id(), ifunc.codec(), ifunc.code()).compile_time)
                           .count());
      if (wait_for_tier1) {
        // As a Receiver would: calls until the tiered code's compile is due
        // (JitOptions::promote_after_calls), then polls until its tier-1
        // code took over (before the next eviction).
        while (cache.promotions_pending() && !cache.compiles_in_progress())
          cache.count_call(ifunc.id());
        while (cache.compiles_in_progress()) {
          if (!cache.promote_ready().failures.empty()) break;
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      }
    }
    // What a Receiver adds before a first load: the signature check (BLAKE2b
    // of the container, one Ed25519 verification), side by side with the load.
    std::vector<double> checks;
    for (int i = 0; i < repeats; ++i) {
      if (gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
      const auto start = std::chrono::steady_clock::now();
      (void)tc::container_signer(ifunc.code());
      checks.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(checks.begin(), checks.end());
    const double check_us = checks.empty() ? 0 : checks[checks.size() / 2];
    std::sort(rounds.begin(), rounds.end());
    const double median = rounds.empty() ? 0 : rounds[rounds.size() / 2];
    const double best = rounds.empty() ? 0 : rounds.front();
    const double first_ms = std::chrono::duration<double, std::milli>(first).count();
    median_of[std::filesystem::weakly_canonical(path).string()] = median;
    fmt::print("{:<40} {:>8} {:>10} {:>10.3f} {:>10.1f} {:>10.1f} {:>10.1f}\n",
               ifunc.name() + " (" + path.substr(path.rfind('/') + 1) + ")",
               tc::to_string(ifunc.codec()), ifunc.code().size(), first_ms, median, best, check_us);
    fmt::print(stderr,
               "{{\"bench\":\"jit_load\",\"container\":\"{}\",\"codec\":\"{}\",\"bytes\":{},"
               "\"first_ms\":{:.3f},"
               "\"median_us\":{:.1f},\"min_us\":{:.1f},\"verify_us\":{:.1f},\"codegen_level\":{},"
               "\"optimisation_level\":{},\"gap_ms\":{}}}\n",
               path, tc::to_string(ifunc.codec()), ifunc.code().size(), first_ms, median, best,
               check_us, codegen_level, optimisation_level, gap_ms);
  }
  // Baselines, when their counter was measured above.
  if (!shared_object.empty() && median_of.contains(binary_counter)) {
    const double dl = bench::dlopen_median_us(shared_object, "counter_main", std::max(repeats, 1));
    const double ratio = median_of[binary_counter] / dl;
    fmt::print(
        "dlopen + dlsym of the counter .so from tmpfs: median {:.1f} us; binary load / "
        "dlopen = {:.2f}x\n",
        dl, ratio);
    fmt::print(stderr, "{{\"bench\":\"dlopen_baseline\",\"median_us\":{:.1f},\"ratio\":{:.3f}}}\n",
               dl, ratio);
  }
  if (!shared_object.empty() && !prelinked_counter.empty()) {
    // The three ways to turn the counter's machine code into an entry point,
    // round by round in turn, so drift on this shared machine falls on all.
    const tc::Ifunc prelinked = tc::Ifunc::load(prelinked_counter);
    const tc::Ifunc object = tc::Ifunc::load(binary_counter);
    bench::DlopenLoader dl(shared_object, "counter_main");
    std::vector<double> image_rounds, object_rounds, dlopen_rounds;
    const auto load_us = [&cache](const tc::Ifunc& ifunc) {
      (void)cache.evict(ifunc.id());
      return std::chrono::duration<double, std::micro>(
                 cache.load(ifunc.id(), ifunc.codec(), ifunc.code()).compile_time)
          .count();
    };
    (void)load_us(prelinked);  // each loader once before timing (first-use costs)
    (void)load_us(object);
    (void)dl.load_us();
    for (int i = 0; i < std::max(repeats, 1); ++i) {
      image_rounds.push_back(load_us(prelinked));
      object_rounds.push_back(load_us(object));
      dlopen_rounds.push_back(dl.load_us());
    }
    const auto median_of_rounds = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double image_us = median_of_rounds(image_rounds);
    const double object_us = median_of_rounds(object_rounds);
    const double dlopen_us = median_of_rounds(dlopen_rounds);
    fmt::print(
        "loaders taking turns, median of {}: pre-linked image {:.1f} us, JITLink object {:.1f} "
        "us, dlopen + dlsym {:.1f} us; pre-linked / dlopen = {:.2f}x, JITLink / dlopen = "
        "{:.2f}x\n",
        image_rounds.size(), image_us, object_us, dlopen_us, image_us / dlopen_us,
        object_us / dlopen_us);
    fmt::print(stderr,
               "{{\"bench\":\"loaders_side_by_side\",\"rounds\":{},\"prelinked_us\":{:.2f},"
               "\"jitlink_us\":{:.2f},\"dlopen_us\":{:.2f},\"prelinked_vs_dlopen\":{:.3f},"
               "\"jitlink_vs_dlopen\":{:.3f}}}\n",
               image_rounds.size(), image_us, object_us, dlopen_us, image_us / dlopen_us,
               object_us / dlopen_us);
  }
  if (!counter_ir.empty() && median_of.contains(bitcode_counter)) {
    std::ifstream in(counter_ir, std::ios::binary);
    const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> ir(raw.size());
    std::memcpy(ir.data(), raw.data(), raw.size());
    // Taking turns round by round with the JitCache's own load of the same
    // counter, so drift on this shared machine falls on both.
    bench::StockLljit stock_o2(optimisation_level);
    bench::StockLljit stock_bare(0);
    const tc::Ifunc ours = tc::Ifunc::load(bitcode_counter);
    std::vector<double> mine, theirs, bare_rounds;
    for (int i = 0; i < std::max(repeats, 1); ++i) {
      (void)cache.evict(ours.id());
      mine.push_back(std::chrono::duration<double, std::micro>(
                         cache.load(ours.id(), ours.codec(), ours.code()).compile_time)
                         .count());
      theirs.push_back(stock_o2.load_us(ir, "counter_main"));
      bare_rounds.push_back(stock_bare.load_us(ir, "counter_main"));
    }
    const auto median_of_rounds = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double stock = median_of_rounds(theirs);
    const double bare = median_of_rounds(bare_rounds);
    const double ratio = median_of_rounds(mine) / stock;
    fmt::print(
        "stock LLJIT on the same bitcode, taking turns: ours {:.1f} us, stock with the O{} "
        "pipeline {:.1f} us (without: {:.1f} us); ours / stock = {:.2f}x\n",
        median_of_rounds(mine), optimisation_level, stock, bare, ratio);
    fmt::print(
        stderr,
        "{{\"bench\":\"stock_lljit_baseline\",\"median_us\":{:.1f},\"without_pipeline_us\":{:.1f},"
        "\"ratio\":{:.3f}}}\n",
        stock, bare, ratio);
  }
  // The handshake's cryptography, per connection: the source signs the
  // transcript (about 200 bytes), the target verifies it.
  const tc::KeyPair key = tc::KeyPair::generate();
  const std::vector<std::byte> transcript(200, std::byte{0x5a});
  std::vector<double> handshake;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    const tc::KeyPair::Signature signature = key.sign(transcript);
    const bool ok = tc::verify_signature(key.public_key(), transcript, signature);
    handshake.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (!ok) return 1;
  }
  std::sort(handshake.begin(), handshake.end());
  fmt::print("handshake crypto (sign + verify): median {:.1f} us\n",
             handshake[handshake.size() / 2]);
  fmt::print(stderr, "{{\"bench\":\"handshake_crypto\",\"median_us\":{:.1f}}}\n",
             handshake[handshake.size() / 2]);
  return 0;
}
