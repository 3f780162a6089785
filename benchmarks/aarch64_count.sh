#!/usr/bin/env bash
# The window shape of issue 33 on aarch64, counted in executed instructions:
# the kernels of threechains-bench-aarch64-shape (saxpy, chase), compiled
# for each CPU natively and shaped (the shaped ones accepted by the aarch64
# verifier), run under qemu-aarch64 from a window (benchmarks/aarch64/
# count_harness.c: x21 = the window's base), one instruction per
# translation block; qemu's trace counts what each executes inside its
# code. qemu's time would mean little; the instruction count is what
# issue 33 asks of aarch64.
#
#   bash benchmarks/aarch64_count.sh [build dir] [n] [json file]
#
# Needs qemu-user-static and gcc-aarch64-linux-gnu (scripts/aarch64-target.sh
# installs both) and a build with benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
n=${2:-4096}
json=${3:-}
for tool in qemu-aarch64-static aarch64-linux-gnu-gcc aarch64-linux-gnu-ld llvm-objcopy-22 llvm-nm-22; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is missing"; exit 0; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
aarch64-linux-gnu-gcc -O2 -static benchmarks/aarch64/count_harness.c -o "$work/harness"
"$build/benchmarks/threechains-bench-aarch64-shape" --objects "$work" > "$work/static.txt"

# count <object> <kernel>: instructions executed inside its code; the
# kernel's printed result goes to $work/result.
count() {
  local object=$1 kernel=$2
  # Linked to run where the harness maps it (kCode in count_harness.c).
  aarch64-linux-gnu-ld -static -e "$kernel" -Ttext=0x4000010000 -o "$work/kernel.elf" "$object"
  llvm-objcopy-22 -O binary --only-section=.text --only-section='.rodata*' \
    "$work/kernel.elf" "$work/text.bin"
  local entry
  entry=$(llvm-nm-22 "$work/kernel.elf" | awk -v k="$kernel" '$3 == k { print $1 }')
  entry=$(printf '0x%x' $((0x$entry - 0x4000010000)))
  qemu-aarch64-static -singlestep -d nochain,exec -D "$work/log" \
    "$work/harness" "$work/text.bin" "$entry" "$kernel" "$n" > "$work/out"
  local low high
  read -r _ low high < <(head -1 "$work/out")
  tail -n +2 "$work/out" > "$work/result"
  # "Trace 0: 0x... [flags/pc/...]": the guest pc is the second field.
  # Both are 16 lowercase hex digits: compared as strings (mawk has no
  # 64-bit numbers).
  awk -v low="$low" -v high="$high" '
    /^Trace/ { split($4, f, "/"); pc = substr(f[2], 1); sub(/^\[/, "", pc)
               if (pc >= low && pc < high) n++ }
    END { print n + 0 }' "$work/log"
}

printf '%-12s %-7s %12s %12s %7s\n' cpu kernel native window ratio
for object in "$work"/*-native.o; do
  name=$(basename "$object" -native.o)
  cpu=${name%-*}
  kernel=${name##*-}
  native=$(count "$object" "$kernel")
  cp "$work/result" "$work/native-result"
  window=$(count "$work/$name-window.o" "$kernel")
  if ! cmp -s "$work/result" "$work/native-result"; then
    echo "$cpu $kernel: the shaped code computed $(cat "$work/result"), native $(cat "$work/native-result")" >&2
    exit 1
  fi
  ratio=$(awk -v a="$window" -v b="$native" 'BEGIN { printf "%.3f", a / b }')
  printf '%-12s %-7s %12s %12s %6sx\n' "$cpu" "$kernel" "$native" "$window" "$ratio"
  if [ -n "$json" ]; then
    printf '{"bench":"aarch64-count","cpu":"%s","kernel":"%s","n":%s,"native_instructions":%s,"window_instructions":%s,"ratio":%s}\n' \
      "$cpu" "$kernel" "$n" "$native" "$window" "$ratio" >> "$json"
  fi
done
