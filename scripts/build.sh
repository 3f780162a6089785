#!/usr/bin/env bash
# Configures and builds ThreeChains in ./build (Release with debug info, Ninja, 2 jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "${THREECHAINS_JOBS:-2}"
