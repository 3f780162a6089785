#!/bin/sh
# The window tier's aarch64 check under qemu-user (tests/window_aarch64):
#   run.sh QEMU CHECK COMPILE_WORKER COUNTER_CONTAINER
# The check's JitCache starts the aarch64 compile worker itself; qemu-user
# cannot exec an aarch64 program without binfmt_misc, so the worker it is
# given (THREECHAINS_COMPILE_WORKER) is a script, run natively, that starts
# the worker under qemu with the descriptors it was handed.
set -eu
qemu=$1 check=$2 worker=$3 container=$4
wrapper=$(mktemp "${TMPDIR:-/tmp}/threechains-worker.XXXXXX")
trap 'rm -f "$wrapper"' EXIT
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$qemu" "$worker" > "$wrapper"
chmod +x "$wrapper"
THREECHAINS_COMPILE_WORKER=$wrapper "$qemu" "$check" "$container"
