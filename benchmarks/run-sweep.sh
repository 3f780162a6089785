#!/usr/bin/env bash
# The sweep behind docs/performance.md ("The cached path"): ifunc vs AM,
# 1 B .. 1 MiB, shm and tcp, then PNG plots. Takes a few minutes on 2 cores.
# Writes <out>/cached-sweep-<date>.{jsonl,txt} and cached-sweep-{shm,tcp}-<date>.png
# (docs/bench/README.md says how data files are named).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/bench}
day=$(date +%F)
mkdir -p "$out"
rm -f "$out/cached-sweep-$day.jsonl"
./build/benchmarks/threechains-bench -n 3000 --warmup 300 --min-size 1 --max-size 1048576 --first-rounds 30 --rounds 3 \
  --json "$out/cached-sweep-$day.jsonl" | tee "$out/cached-sweep-$day.txt"
dpkg-query -W -f='${Status}' python3-matplotlib 2>/dev/null | grep -q "install ok installed" ||
  { apt-get update -q && apt-get install -y -q --no-install-recommends python3-matplotlib; }
/usr/bin/python3 benchmarks/plot_all.py --bench "$out/cached-sweep-$day.jsonl" "$out"
