#!/bin/sh
# Runs a target and a source as two processes: the target writes its port to
# a file, the source is started with it, and both must succeed.
#   run_pair.sh WORKDIR 'TARGET COMMAND (PORTFILE appended)' 'SOURCE COMMAND (PORT appended)'
set -eu
workdir=$1
target=$2
source=$3
mkdir -p "$workdir"
portfile="$workdir/port.$$"
rm -f "$portfile"
# shellcheck disable=SC2086
$target "$portfile" &
target_pid=$!
waited=0
while [ ! -s "$portfile" ]; do
  if ! kill -0 "$target_pid" 2>/dev/null; then
    echo "run_pair: the target exited before it listened" >&2
    wait "$target_pid" || true
    exit 1
  fi
  waited=$((waited + 1))
  if [ "$waited" -gt 600 ]; then
    echo "run_pair: the target did not listen within 60 s" >&2
    kill "$target_pid"
    exit 1
  fi
  sleep 0.1
done
port=$(cat "$portfile")
rm -f "$portfile"
source_rc=0
# shellcheck disable=SC2086
$source "$port" || source_rc=$?
# A source that failed may never have connected: do not wait out the target.
[ "$source_rc" -eq 0 ] || kill "$target_pid" 2>/dev/null || true
target_rc=0
wait "$target_pid" || target_rc=$?
echo "run_pair: source exit $source_rc, target exit $target_rc"
[ "$source_rc" -eq 0 ] && [ "$target_rc" -eq 0 ]
