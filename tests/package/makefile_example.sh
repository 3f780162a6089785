#!/bin/sh
# The README's Makefile example, built against an installed ThreeChains with
# make, pkg-config and threechains-build only, then run; then a header-free
# rebuild check: touching the ifunc's source rebuilds its container.
#   makefile_example.sh EXAMPLE_DIR PREFIX WORK
set -eu
example=$1 prefix=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cp "$example"/* "$work"/
libdir=$(dirname "$(find "$prefix" -name threechains.pc | head -n 1)")/..
export PATH="$prefix/bin:$PATH" PKG_CONFIG_PATH="$libdir/pkgconfig" LD_LIBRARY_PATH="$libdir"
make -C "$work"
(cd "$work" && ./run_squares)
before=$(stat -c %Y "$work/squares.tcc")
sleep 1.1
touch "$work/squares.c"
make -C "$work" squares.tcc
after=$(stat -c %Y "$work/squares.tcc")
test "$after" -gt "$before" || { echo "editing squares.c did not rebuild squares.tcc"; exit 1; }
echo "makefile example: built, ran, and rebuilt after an edit"
