#!/usr/bin/env bash
# scripts/gpu-check.sh — the GPU half of ThreeChains where an NVIDIA GPU is:
# the [gpu] tests (each in a process of its own: CUDA, like UCX, does not
# survive a fork), the GPU example and threechains-bench-gpu beside an nvcc
# build of its saxpy kernel. Elsewhere the same tests say "SKIP: no GPU".
#
#   bash scripts/gpu-check.sh            # with a build in build/ and a GPU here
#   bash scripts/gpu-check.sh pack       # here: pack build/ for a bare GPU machine
#                                        #  (../shared/tools/device-bundle, .device/)
#   GPU_CHECK_BUILD=$PWD/build bash scripts/gpu-check.sh unpack
#                                        # there: unpack it, then run as above
# Figures and logs go to $GPU_CHECK_OUT (default build/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/device-bundle.sh
device_bundle "${1:-run}" build/src build/keys build/tests/threechains-tests \
      build/tests/bindings/c_gpu \
      build/tests/*.tcc build/examples/threechains-gpu-field build/examples/*.tcc \
      build/benchmarks/threechains-bench-gpu build/benchmarks/*.tcc
# The build: build/ here; on the GPU machine where the bundle put it (the
# absolute path it had where it was packed), GPU_CHECK_BUILD.
build=$(cd "${GPU_CHECK_BUILD:-build}" && pwd -P) || exit 1
out=${GPU_CHECK_OUT:-$build/gpu-check}
mkdir -p "$out"
status=0
step() { echo; echo "=== $*"; }
step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"

step "tests tagged [gpu], one process each"
"$build/tests/threechains-tests" --list-test-names-only "[gpu]" | grep -v '^$' >"$out/gpu-tests.txt"
while IFS= read -r name; do
  start=$(date +%s%N)
  if timeout 180 "$build/tests/threechains-tests" "$name" >"$out/test.log" 2>&1 &&
    ! grep -q "No test cases matched" "$out/test.log"; then
    verdict=passed
    if grep -q "SKIP: " "$out/test.log"; then
      verdict="SKIPPED ($(grep -o 'SKIP: .*' "$out/test.log" | head -1))"
      # Here a GPU test that skips failed to find the GPU: only the test of
      # a host without one may skip.
      grep -q "this host has a GPU" "$out/test.log" || status=1
    fi
  else
    verdict=FAILED
    status=1
    cat "$out/test.log"
  fi
  printf '%-100s %s (%d ms)\n' "$name" "$verdict" $((($(date +%s%N) - start) / 1000000))
done <"$out/gpu-tests.txt"

step "the C API's GPU calls"
timeout 60 "$build/tests/bindings/c_gpu" || status=1

step "example: threechains-gpu-field"
for transport in shm tcp; do
  timeout 180 "$build/examples/threechains-gpu-field" --transport $transport || status=1
done

step "benchmark: threechains-bench-gpu"
cubin_args=()
if command -v nvcc >/dev/null; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
  if nvcc -O3 -arch=sm_${arch} -cubin -o "$out/gpu_saxpy.cubin" benchmarks/kernels/gpu/gpu_saxpy.cu; then
    cubin_args=(--cubin "$out/gpu_saxpy.cubin")
  fi
else
  echo "no nvcc: the nvcc baselines are left out"
fi
timeout 300 "$build/benchmarks/threechains-bench-gpu" "${cubin_args[@]}" --json "$out/bench-gpu.json" || status=1
echo
echo "gpu-check: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
