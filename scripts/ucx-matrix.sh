#!/usr/bin/env bash
# The whole suite on every UCX this library supports: Debian 12's 1.13 (the
# system one) and the releases in ../shared/ucx/ (1.16.0, 1.18.1, 1.22.0),
# each built once into a cache (scripts/build-ucx.sh).
#
# Two ways a user meets another UCX, both run:
# - "runs on": the build against the system UCX (build/), run with
#   LD_LIBRARY_PATH naming the newer one (the sonames promise it);
# - "built against": the library and its tests built against 1.22.0
#   (build-ucx-1.22.0/, -DCMAKE_PREFIX_PATH), run on it.
#
#   scripts/ucx-matrix.sh                  # all of it (about an hour on 2 cores)
#   UCX_VERSIONS="1.22.0" scripts/ucx-matrix.sh
#   CTEST_ARGS="-R attack" scripts/ucx-matrix.sh
#
# Prints one line per run and writes them to build/ucx-matrix.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
versions="${UCX_VERSIONS:-1.16.0 1.18.1 1.22.0}"
built_against="${UCX_BUILT_AGAINST:-1.22.0}"
read -r -a ctest_args <<<"${CTEST_ARGS:-}"
jobs="${JOBS:-2}"
summary=build/ucx-matrix.txt

[[ -x build/tests/threechains-tests ]] || bash scripts/build.sh
: >"$summary"

# Runs the suite in `dir` with the UCX libraries in `libdir` (empty: the
# system's), and records the result under `label`. With another UCX under a
# build (`libdir` set for `build/`), two kinds of test cannot mean anything
# and are left out, said so in the summary: package.* builds consumers, and
# its linker would mix the two UCX's libraries; hetero.* talks to an aarch64
# process whose UCX is the cross sysroot's 1.13, and UCX 1.13 and 1.22 peers
# cannot connect (ucp_ep_create(accept): Invalid parameter, both ways).
run_suite() {
  local label=$1 dir=$2 libdir=$3
  local exclude=()
  if [[ -n $libdir && $dir == build ]]; then
    exclude=(-E 'package\.|hetero\.')
    label="$label (package.* and hetero.* left out)"
  fi
  local log="$dir/ucx-matrix-${label//[^A-Za-z0-9.]/_}.log"
  local start=$SECONDS status=passed
  echo "ucx-matrix: $label ..."
  if ! LD_LIBRARY_PATH="${libdir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      ctest --test-dir "$dir" -j"$jobs" --output-on-failure "${exclude[@]}" "${ctest_args[@]}" >"$log" 2>&1; then
    status=FAILED
  fi
  local tally
  tally="$(grep -E '^[0-9]+% tests passed' "$log" | tail -1)"
  local line
  line="$(date +%F) $label: $status, ${tally:-no tally} ($((SECONDS - start)) s; $log)"
  echo "$line" | tee -a "$summary"
  if [[ $status == FAILED ]]; then
    grep -E '^\s+[0-9]+ - .*\(Failed\)' "$log" | sed 's/^/    /' | tee -a "$summary" || true
  fi
}

system_version="$(ucx_info -v 2>/dev/null | sed -n 's/.*Library version: *\([0-9.]*\).*/\1/p' | head -1)"
run_suite "UCX ${system_version:-1.13} (system), built against it" build ""

for version in $versions; do
  prefix="$(bash scripts/build-ucx.sh "$version" | tail -1)"
  run_suite "UCX $version, built against ${system_version:-1.13}" build "$prefix/lib"
done

for version in $built_against; do
  prefix="$(bash scripts/build-ucx.sh "$version" | tail -1)"
  dir="build-ucx-$version"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
    >"$dir.configure.log" 2>&1 ||
    { tail -20 "$dir.configure.log"; exit 1; }
  cmake --build "$dir" -j"$jobs" >"$dir.build.log" 2>&1 || { tail -40 "$dir.build.log"; exit 1; }
  run_suite "UCX $version, built against it" "$dir" "$prefix/lib"
done

echo "ucx-matrix: done; $summary:"
cat "$summary"
