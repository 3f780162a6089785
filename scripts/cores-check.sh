#!/usr/bin/env bash
# scripts/cores-check.sh — issue 21's figures on a machine with many quiet
# cores (the device machine: 16 of them), where the 2-core VM cannot say how
# the design stands: tcp parity with UCX's strongest AM over 8 B-64 KiB, the
# floor, wake-up after a silence, rate with 1024 idle peers, parallel
# connects, and the 1-, 2- and 4-server chase (X-RDMA) against AM and GET.
#
#   bash scripts/cores-check.sh pack      # here: pack build/ (.device/, device-bundle)
#   CORES_CHECK_BUILD=/work/main/build bash scripts/cores-check.sh unpack
#                                         # there: unpack it, then run as below
#   bash scripts/cores-check.sh           # with a build in build/
# JSON and logs go to $CORES_CHECK_OUT (default build/cores-check);
# CORES_CHECK_STEPS names the steps to run (default: all of them).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device-bundle.sh
device_bundle "${1:-run}" build/src build/keys build/tests/attack/threechains-attack-target \
      build/benchmarks/threechains-bench build/benchmarks/threechains-bench-idle \
      build/benchmarks/threechains-bench-connect build/benchmarks/*.tcc build/benchmarks/*.so \
      build/benchmarks/*.o build/examples/threechains-chase build/examples/*.tcc
build=$(cd "${CORES_CHECK_BUILD:-build}" && pwd -P) || exit 1
out=${CORES_CHECK_OUT:-$build/cores-check}
mkdir -p "$out"
status=0
steps=" ${CORES_CHECK_STEPS:-bench idle sparse connect chase chase1} "
step() {
  local limit=$1 name=$2
  shift 2
  [[ $steps == *" $name "* ]] || return 0
  echo
  echo "=== $name ($(date +%T))"
  timeout "$limit" "$@" 2>&1 | tee -a "$out/cores-check.log" | grep -v '^{' || status=1
}
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); kernel $(uname -r)"

step 150 bench "$build/benchmarks/threechains-bench" --transports shm tcp \
  --modes am,am-strong,ifunc-binary-cached --metrics latency,rate --min-size 8 --max-size 65536 \
  -n 3000 --warmup 300 --rounds 3 --json "$out/bench.jsonl"
step 120 idle "$build/benchmarks/threechains-bench-idle" --transports shm tcp \
  --policies sleep spin --peers 16 --idle-seconds 3 --gap-ms 100 --wakes 30 --hot 2000 \
  --crowd 1 1024 --crowd-policies sleep --crowd-rounds 3 --json "$out/idle.jsonl"
step 60 sparse "$build/benchmarks/threechains-bench-idle" --transports shm tcp \
  --policies sleep sleep-4000 sleep-10000 --peers 1 --idle-seconds 1 --gap-ms 20 --wakes 50 \
  --hot 500 --crowd 1 --crowd-policies sleep --crowd-rounds 1 --json "$out/idle.jsonl"
step 60 connect "$build/benchmarks/threechains-bench-connect" -n 5 --transports shm tcp \
  --many 256 --many-rounds 3
step 120 chase "$build/examples/threechains-chase" --transports shm tcp --servers 2 4 \
  --modes ifunc-binary am get --min-depth 64 --max-depth 64 --chases 50 --rounds 3 \
  --json "$out/chase.jsonl"
step 90 chase1 "$build/examples/threechains-chase" --transports shm tcp --servers 1 \
  --modes ifunc-binary am --min-depth 256 --max-depth 16384 --chases 50 --rounds 3 \
  --json "$out/chase.jsonl"
echo
echo "cores-check: $([ $status = 0 ] && echo passed || echo 'FAILED (a step failed or ran out of time)')"
exit $status
