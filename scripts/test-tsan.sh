#!/usr/bin/env bash
# The tests that run a progress thread, a tier-1 compile thread, or the threads that check
# large code and prepare large confined containers, built with clang-22 under
# ThreadSanitizer (CMakePresets.json "tsan", in ./build-tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
THREECHAINS_EXTRA_PACKAGES="libclang-rt-22-dev" bash scripts/install-deps.sh
export UCX_MEM_MMAP_HOOK_MODE=none  # as for ASan: UCX's mmap patching and the sanitizer clash
cmake --preset tsan
cmake --build --preset tsan
ctest --preset tsan
