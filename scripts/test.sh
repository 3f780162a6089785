#!/usr/bin/env bash
# README command 2: install what is missing, build, and run the whole test suite under CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest -j "${THREECHAINS_JOBS:-2}" --output-on-failure --timeout 600
