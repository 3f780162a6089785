#!/usr/bin/env bash
# The whole test suite built with clang-22 under AddressSanitizer and
# UndefinedBehaviorSanitizer (CMakePresets.json "asan", in ./build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
THREECHAINS_EXTRA_PACKAGES="libclang-rt-22-dev" bash scripts/install-deps.sh
# UCX patches mmap in the loaded code (ucm "bistro" hooks), which ASan's own
# interceptors cannot live with: the program crashes before main. UCX's
# memory-event hooks only serve its registration cache, which these
# transports work without.
export UCX_MEM_MMAP_HOOK_MODE=none
# The build runs instrumented tools (threechains-pack): their leaks count too.
export LSAN_OPTIONS="suppressions=$PWD/.ci/lsan.supp:print_suppressions=0"
cmake --preset asan
cmake --build --preset asan
# The preset leaves out package.add_subdirectory: it builds the whole library
# again as a subproject (about 250 s of the stage's 2 cores under ASan) and
# checks the CMake packaging, which the main suite checks already.
ctest --preset asan
