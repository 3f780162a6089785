#!/usr/bin/env bash
# Builds the libFuzzer targets (CMakePresets.json "fuzz": clang-22,
# ASan+UBSan) and runs each for FUZZ_SECONDS (default 60) on a scratch copy of
# its seed corpus in tests/fuzz/corpus. A crash fails the run and leaves the
# input in build-fuzz/crashes/<target>/: make it a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
THREECHAINS_EXTRA_PACKAGES="libclang-rt-22-dev" bash scripts/install-deps.sh
export UCX_MEM_MMAP_HOOK_MODE=none  # as for the sanitizer build
seconds=${FUZZ_SECONDS:-60}
cmake --preset fuzz
cmake --build --preset fuzz
for target in frame container receive control ucp_ifunc prelinked verifier verifier_aarch64; do
  corpus=build-fuzz/corpus/$target
  crashes=build-fuzz/crashes/$target
  rm -rf "$corpus" && mkdir -p "$corpus" "$crashes"
  cp tests/fuzz/corpus/$target/* "$corpus"/
  echo "fuzz: $target for ${seconds} s"
  log=build-fuzz/fuzz-$target.log
  rc=0
  # The live-link fuzzers keep one UCX connection across inputs (and
  # reconnect): UCX's state made during an input outlives it by design, which
  # libFuzzer's per-input leak check would call a leak. ASan+UBSan still run.
  leaks=()
  case $target in receive|control) leaks=(-detect_leaks=0) ;; esac
  ./build-fuzz/tests/fuzz/fuzz_$target "$corpus" -max_total_time="$seconds" "${leaks[@]}" \
    -artifact_prefix="$crashes/" -print_final_stats=1 > "$log" 2>&1 || rc=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|DONE|ERROR|SUMMARY" "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -40 "$log"
    echo "fuzz: $target failed (exit $rc); the input is in $crashes"
    exit 1
  fi
done
# Confinement itself (issue 20): llvm-stress's random IR, confined, against
# canaries. Built by the main build (build/), where there is one.
if [ -x build/tests/threechains-confine-stress ]; then
  echo "fuzz: confinement for ${seconds} s"
  ./build/tests/threechains-confine-stress --seconds "$seconds" --first 100000 --size 120
  # The same with types compilers choke on, through the compile worker.
  echo "fuzz: confinement with mutated types for ${seconds} s"
  ./build/tests/threechains-confine-stress --seconds "$seconds" --first 200000 --size 120 --mutate
  # The window tier (issue 33): what takes the shape runs verified in a window.
  echo "fuzz: confinement in the window tier for ${seconds} s"
  ./build/tests/threechains-confine-stress --seconds "$seconds" --first 300000 --size 120 --window-tier
fi
echo "fuzz: no crash"
