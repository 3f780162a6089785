#!/usr/bin/env bash
# What including the umbrella header costs a user's compile (issue 35, item
# 5): <threechains/threechains.hpp> against the baseline its API cannot be
# cheaper than, <ucp/api/ucp.h> and the standard headers the public types
# are made of. Each translation unit is compiled `rounds` times, the three
# taking turns; each figure is the least CPU time (user + system) the
# compiler took for that unit: the unit's own cost, without the machine's
# noise (on a shared VM the clock, and the median, swing by 50 %).
#
#   benchmarks/header_cost.sh [--rounds N] [--json FILE]     # CXX=clang++-22 to try clang
#
# Prints one line per unit and the umbrella's cost over the baseline; with
# --json, appends one JSON line per unit and one for the difference.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5
json=""
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "header_cost: unknown argument $1" >&2; exit 2 ;;
  esac
done
cxx=${CXX:-g++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/umbrella.cpp" <<'EOF'
#include <threechains/threechains.hpp>
EOF
# The standard headers the public API's own types are made of, and UCX's.
cat >"$work/baseline.cpp" <<'EOF'
#include <ucp/api/ucp.h>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>
EOF
cat >"$work/ucp.cpp" <<'EOF'
#include <ucp/api/ucp.h>
EOF

seconds() {  # CPU time (user + system) of one compile: steadier than the clock on a shared machine
  local TIMEFORMAT='%U %S' times
  times=$({ time "$cxx" -std=c++20 -O2 -Iinclude -c "$work/$1.cpp" -o "$work/$1.o"; } 2>&1)
  awk -v t="$times" 'BEGIN {split(t, a, " "); printf "%.4f", a[1] + a[2]}'
}
least() { sort -g | head -1; }

units=(umbrella baseline ucp)
declare -A times
for unit in "${units[@]}"; do times[$unit]=""; done
for _ in $(seq "$rounds"); do
  for unit in "${units[@]}"; do times[$unit]+="$(seconds "$unit") "; done
done
declare -A least_of
for unit in "${units[@]}"; do
  least_of[$unit]=$(tr ' ' '\n' <<<"${times[$unit]}" | grep . | least)
  printf '%-9s %.3f s  (runs: %s)\n' "$unit" "${least_of[$unit]}" "${times[$unit]}"
done
over=$(awk -v a="${least_of[umbrella]}" -v b="${least_of[baseline]}" 'BEGIN {printf "%.4f", a - b}')
printf 'umbrella over baseline: %.3f s (%s, %s rounds)\n' "$over" "$("$cxx" --version | head -1)" "$rounds"
if [[ -n $json ]]; then
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  for unit in "${units[@]}"; do
    printf '{"unit":"%s","seconds":%.4f,"compiler":"%s","rounds":%d,"commit":"%s"}\n' \
      "$unit" "${least_of[$unit]}" "$cxx" "$rounds" "$commit" >>"$json"
  done
  printf '{"unit":"umbrella_over_baseline","seconds":%.4f,"compiler":"%s","rounds":%d,"commit":"%s"}\n' \
    "$over" "$cxx" "$rounds" "$commit" >>"$json"
fi
