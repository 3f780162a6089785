#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the demo (a source
# process sends the counter ifunc to a target process, over shm then tcp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/examples/threechains-demo "$@"
