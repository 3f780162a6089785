#!/usr/bin/env bash
# Builds the aarch64 target program of the heterogeneous test (tests/hetero:
# one fat container run by an x86_64 target and an aarch64 one, the latter
# under qemu-aarch64-static). Installs qemu-user-static, Debian's aarch64 cross
# compiler and, through multiarch, the arm64 runtime libraries of UCX, LLVM
# and the rest (and Rust's core library for arm64, for Rust ifuncs);
# cross-builds the library and the program into build-aarch64;
# and the window tier's aarch64 check (tests/window_aarch64), and points
# ./build's tests at them. Then: ctest --test-dir build -R 'hetero|aarch64'.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  "${sudo_cmd[@]}" dpkg --add-architecture arm64  # install-deps runs apt-get update
fi
THREECHAINS_EXTRA_PACKAGES="qemu-user-static g++-aarch64-linux-gnu libucx0:arm64 libllvm22:arm64 \
libsodium23:arm64 libxxhash0:arm64 libzstd1:arm64 libfmt9:arm64 libstd-rust-web-dev:arm64" \
bash scripts/install-deps.sh
cmake -S . -B build-aarch64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DTHREECHAINS_BUILD_TESTS=OFF -DTHREECHAINS_BUILD_EXAMPLES=OFF -DTHREECHAINS_BUILD_BENCHMARKS=OFF \
  -DTHREECHAINS_BUILD_TOOLS=OFF -DTHREECHAINS_INSTALL=OFF \
  -DTHREECHAINS_WITH_PMIX=OFF -DTHREECHAINS_WITH_MPI=OFF \
  -DTHREECHAINS_WITH_SECCOMP=OFF  # no arm64 libseccomp-dev here; the test runs no confined code
cmake --build build-aarch64 -j "${THREECHAINS_JOBS:-2}" --target threechains-hetero-target \
  threechains-window-aarch64-check threechains-compile-worker
target="$PWD/build-aarch64/tests/hetero/threechains-hetero-target"
window_check="$PWD/build-aarch64/tests/window_aarch64/threechains-window-aarch64-check"
compile_worker="$PWD/build-aarch64/src/threechains-compile-worker"
if [ -d build ]; then
  # Reconfigured: it now also builds the Rust ifuncs' aarch64 images.
  cmake -S . -B build -DTHREECHAINS_AARCH64_TARGET="$target" \
    -DTHREECHAINS_AARCH64_WINDOW_CHECK="$window_check" \
    -DTHREECHAINS_AARCH64_COMPILE_WORKER="$compile_worker" > /dev/null
  cmake --build build -j "${THREECHAINS_JOBS:-2}"
fi
echo "aarch64-target: $target"
