#!/bin/sh
# The same fat containers (each in turn) sent by an x86_64 source to an x86_64
# target and to an aarch64 target (under qemu-aarch64-static), over UCX tcp on
# loopback; each target checks its counter. The aarch64 figures are emulated:
# compare them with each other, not with the x86_64 ones.
#   run.sh DIR CXX_COUNTER AARCH64_TARGET QEMU KEY PUBKEY MISSING CONTAINER...
set -eu
dir=$1 native=$2 aarch64=$3 qemu=$4 key=$5 pub=$6 missing=$7
shift 7
run_pair=$(dirname "$0")/../bindings/run_pair.sh
frames=200
for container in "$@"; do
  "$run_pair" "$dir" "$native target tcp $pub $frames" \
    "$native source tcp $container $key $frames"
  "$run_pair" "$dir" "$qemu $aarch64 target tcp $pub $frames" \
    "$native source tcp $container $key $frames"
done
echo "hetero: $# containers ran on x86_64 and on aarch64 (emulated)"
[ -z "$missing" ] || echo "hetero: not built, so not run: $missing"
