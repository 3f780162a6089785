#!/usr/bin/env bash
# Builds one UCX release from its source tarball into a cache keyed by the
# tarball's hash, and prints the install prefix (the last line of stdout).
# Rebuilt only when that prefix is missing: a CI machine that keeps
# /var/cache pays the ~7 minutes (2 cores) once per tarball.
#
#   scripts/build-ucx.sh 1.22.0            # ../shared/ucx/ucx-1.22.0.tar.xz
#   scripts/build-ucx.sh path/to/ucx-X.Y.Z.tar.xz
#
# THREECHAINS_UCX_CACHE (default /var/cache/threechains/ucx) is the cache;
# THREECHAINS_UCX_SOURCES (default ../shared/ucx next to the checkout) holds
# the tarballs. The build is UCX's own release configuration
# (contrib/configure-release) with the transports this project tests over
# (tcp, posix/sysv/cma shared memory, self) and no RDMA, GPU or language
# bindings. THREECHAINS_UCX_CONFIGURE adds flags
# (e.g. --with-verbs for an RDMA machine); the cache key includes them.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
sources="${THREECHAINS_UCX_SOURCES:-$here/../shared/ucx}"
cache="${THREECHAINS_UCX_CACHE:-/var/cache/threechains/ucx}"
jobs="${JOBS:-2}"

arg="${1:?usage: build-ucx.sh VERSION|TARBALL}"
if [[ -f "$arg" ]]; then
  tarball="$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")"
else
  tarball="$sources/ucx-$arg.tar.xz"
fi
[[ -f "$tarball" ]] || { echo "build-ucx: no tarball $tarball" >&2; exit 2; }
name="$(basename "$tarball" .tar.xz)"  # ucx-X.Y.Z
flags=(--without-java --without-go --without-cuda --without-rocm --without-ze --without-gdrcopy
  --without-verbs --without-rdmacm --without-knem --without-xpmem --without-fuse3 --without-mad
  --without-ugni --without-efa --without-valgrind --disable-doxygen-doc)
read -r -a extra <<<"${THREECHAINS_UCX_CONFIGURE:-}"
flags+=("${extra[@]}")
hash="$({ sha256sum <"$tarball"; echo "${flags[*]}"; } | sha256sum | cut -c1-16)"
prefix="$cache/$name-$hash"

if [[ -f "$prefix/.complete" ]]; then
  echo "build-ucx: $name cached in $prefix" >&2
  echo "$prefix"
  exit 0
fi

# What building UCX from a git archive needs (no generated configure).
need=()
for tool in xz autoconf automake libtoolize make gcc g++ pkg-config; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
if ((${#need[@]})); then
  echo "build-ucx: installing what building UCX needs (missing: ${need[*]})" >&2
  if [[ $(id -u) -ne 0 ]]; then echo "build-ucx: run as root or install them" >&2; exit 2; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    xz-utils autoconf automake libtool make gcc g++ pkg-config >&2
fi

work="$(mktemp -d /tmp/build-ucx.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
tar -xJf "$tarball" -C "$work"
cd "$work/$name"
{
  ./autogen.sh
  ./contrib/configure-release --prefix="$prefix" "${flags[@]}"
  make -j"$jobs"
  rm -rf "$prefix"
  make install
} >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; echo "build-ucx: $name failed" >&2; exit 1; }
touch "$prefix/.complete"
echo "build-ucx: $name built into $prefix in $((SECONDS - start)) s" >&2
echo "$prefix"
