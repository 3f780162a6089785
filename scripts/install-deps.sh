#!/usr/bin/env bash
# Installs every Debian 12 package ThreeChains needs to build, test and run its demo.
# Idempotent: packages already present are skipped; apt-get update runs only when
# something is missing. Run as root (as CI and the fresh-machine check do) or with sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config
  libucx-dev ucx-utils
  llvm-22 llvm-22-dev clang-22 lld-22 libzstd-dev libc6-dev-arm64-cross libomp-22-dev
  libfmt-dev libcli11-dev catch2 libxxhash-dev libsodium-dev libseccomp-dev
  libzydis-dev  # the window verifier's x86-64 decoder (src/confine/verify_x86.cpp)
  libopenmpi-dev openmpi-bin libpmix-dev
  gdb linux-perf  # tests that debuggers and profilers see JIT'd ifuncs (test_observe.cpp)
  gfortran flang-22 rustc-web python3 python3-numpy
)
# A caller may ask for more (e.g. the sanitizer runtime): THREECHAINS_EXTRA_PACKAGES="a b".
read -r -a extra <<< "${THREECHAINS_EXTRA_PACKAGES:-}"
packages+=("${extra[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
