#!/bin/sh
# A prototype-shaped program (tests/prototype/two_chains_test_ifunc.cpp, which
# includes only <ucp/api/ucp.h>) built against the installed prefix with
# nothing but `pkg-config --cflags --libs threechains-ucp-ifunc`, then run
# over shared memory and over tcp (where its 4-argument poll lands puts only
# by progressing the worker it learnt of: pkg-config's Libs order) against
# the build's libraries. No LD_LIBRARY_PATH: the program finds the prefix by
# the runpath pkg-config gave it, and the library finds its own beside it.
#   ucp_ifunc_pkg_config.sh SOURCE_DIR PREFIX WORK LIB_DIR
set -eu
source_dir=$1 prefix=$2 work=$3 libs=$4
rm -rf "$work" && mkdir -p "$work"
pcdir=$(dirname "$(find "$prefix" -name threechains-ucp-ifunc.pc | head -n 1)")
export PKG_CONFIG_PATH="$pcdir"
unset LD_LIBRARY_PATH
# shellcheck disable=SC2046,SC2086
${CXX:-c++} ${CXXFLAGS:-} -std=c++20 -O2 "$source_dir/two_chains_test_ifunc.cpp" \
  $(pkg-config --cflags --libs threechains-ucp-ifunc) -o "$work/test_ifunc"
for tls in sm,self tcp,self; do
  UCX_TLS=$tls UCX_IFUNC_LIB_DIR=$libs UCX_WARN_UNUSED_ENV_VARS=n \
    sh "$source_dir/../bindings/run_pair.sh" "$work" "$work/test_ifunc server" "$work/test_ifunc client"
done
echo "ucp_ifunc pkg-config: built with its flags alone, and ran"
