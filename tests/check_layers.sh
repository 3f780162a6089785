#!/usr/bin/env bash
# Includes run down the layers, never up (docs/design.md, "Layers"): a file
# of one layer includes files of its own layer or of a lower one. A lower
# layer that needs something of a higher one gets it through an interface it
# owns (the runtime's hooks, the JIT's options), or the code moves down.
#
#   tests/check_layers.sh [source root]     # prints each include that runs up; exit 1 if any
#
# Checked: every #include in src/<layer>/ (quoted, "<layer>/file") and in
# include/threechains/ (<threechains/file>), each file ranked by the layer
# that owns it.
set -euo pipefail
root="${1:-$(dirname "$0")/..}"
cd "$root"

# Bottom to top. "base": the formats and helpers every layer uses (frames,
# containers, errors, the Ifunc handle, src/*.cpp).
layers=(base ucx trust runtime confine jit gpu engine launch capi ucp_ifunc)
rank_of_layer() {
  local i
  for i in "${!layers[@]}"; do
    [[ ${layers[$i]} == "$1" ]] && { echo "$i"; return; }
  done
  echo "check_layers: no layer '$1' (add it to the list)" >&2
  exit 2
}

# The layer of a public header, by what implements it.
layer_of_public() {
  case "$1" in
    ucx/*) echo ucx ;;
    trust.hpp) echo trust ;;
    runtime.h) echo runtime ;;
    confinement.hpp) echo confine ;;
    jit_cache.hpp | codec.hpp) echo jit ;;
    gpu.hpp) echo gpu ;;
    channel.hpp | receiver.hpp | node.hpp | progress.hpp | payload_helpers.hpp | detail/spin.hpp)
      echo engine ;;
    launch.hpp) echo launch ;;
    threechains.h | threechains.hpp) echo capi ;;
    ucp_ifunc.h) echo ucp_ifunc ;;
    *) echo base ;;
  esac
}

# The layer of a file of this tree, by its path.
layer_of_file() {
  case "$1" in
    src/*/*) local rest=${1#src/}; echo "${rest%%/*}" ;;
    src/*) echo base ;;
    include/threechains/*) layer_of_public "${1#include/threechains/}" ;;
  esac
}

violations=0
while IFS= read -r file; do
  from=$(layer_of_file "$file")
  from_rank=$(rank_of_layer "$from")
  while IFS= read -r line; do
    target=""
    if [[ $line =~ ^#include\ \"([a-z_]+)/[^\"]+\" ]]; then
      target="${BASH_REMATCH[1]}"
    elif [[ $line =~ ^#include\ \<threechains/([^\>]+)\> ]]; then
      target=$(layer_of_public "${BASH_REMATCH[1]}")
    fi
    [[ -z $target ]] && continue
    target_rank=$(rank_of_layer "$target")
    if ((target_rank > from_rank)); then
      echo "$file ($from) includes up into $target: $line"
      violations=$((violations + 1))
    fi
  done < <(grep -E '^#include ' "$file")
done < <(find src include/threechains -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) | sort)

if ((violations > 0)); then
  echo "check_layers: $violations include(s) run up the layers"
  exit 1
fi
echo "check_layers: every include runs down the layers (${layers[*]})"
