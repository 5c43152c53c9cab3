#!/usr/bin/env bash
# Collects what kwb needs to build on a machine without a package registry (a lent GPU machine: nvcc, cmake, ninja
# and a compiler, nothing else) into third_party/, from this Debian machine's packages (scripts/setup.sh installs
# them): the header-only libraries (toml++, CLI11, nlohmann-json, fmt used header-only, DLPack, the OpenCL headers
# the worker's opencl backend compiles against; CUDA 13 no longer ships them), and the headers plus shared objects
# of the three compiled ones (libseccomp, OpenSSL's libcrypto, SQLite), and bubblewrap's binary. `cmake -DKWB_THIRD_PARTY=...` builds against
# these instead of find_package (CMakeLists.txt); tests/gpu/run.sh does that when the folder
# exists. third_party/ is generated, never committed.
#
#   bash scripts/vendor_third_party.sh [OUT]     (default OUT: third_party/ in the repository)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/third_party}
rm -rf "$out"
mkdir -p "$out/include" "$out/lib"

copy_headers() {  # the header paths a Debian package installs under /usr/include, with their layout
  local pkg=$1
  dpkg -L "$pkg" | while read -r f; do
    case "$f" in
      /usr/include/*) if [ -f "$f" ]; then
                        rel=${f#/usr/include/}
                        rel=${rel#x86_64-linux-gnu/}  # multiarch headers (openssl/configuration.h) join the rest
                        mkdir -p "$out/include/$(dirname "$rel")"
                        cp "$f" "$out/include/$rel"
                      fi ;;
    esac
  done
}

for pkg in libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev libdlpack-dev libseccomp-dev libssl-dev \
           opencl-c-headers libsqlite3-dev libcurl4-openssl-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || { echo "vendor: $pkg is not installed (bash scripts/setup.sh)" >&2; exit 69; }
  copy_headers "$pkg"
done
# The compiled libraries, by soname, as the linker and ldd will look for them.
libdir=/usr/lib/x86_64-linux-gnu
cp -L "$libdir/libseccomp.so.2" "$out/lib/libseccomp.so.2"
cp -L "$libdir/libcrypto.so.3" "$out/lib/libcrypto.so.3"
cp -L "$libdir/libsqlite3.so.0" "$out/lib/libsqlite3.so.0"
ln -sf libsqlite3.so.0 "$out/lib/libsqlite3.so"
ln -sf libseccomp.so.2 "$out/lib/libseccomp.so"
ln -sf libcrypto.so.3 "$out/lib/libcrypto.so"
# bubblewrap, which kwb compiles every candidate inside (src/builder/build_sandbox.cpp): the GPU machine's image has
# none. Its libraries beside it in bin/lib, for tests/gpu/run.sh to name only where that machine lacks them.
dpkg -s bubblewrap >/dev/null 2>&1 || { echo "vendor: bubblewrap is not installed (bash scripts/setup.sh)" >&2; exit 69; }
mkdir -p "$out/bin/lib"
cp /usr/bin/bwrap "$out/bin/bwrap"
for lib in libselinux.so.1 libcap.so.2 libpcre2-8.so.0; do cp -L "$libdir/$lib" "$out/bin/lib/$lib"; done
{
  echo "# Collected by scripts/vendor_third_party.sh on $(hostname) at $(date -u +%FT%TZ)"
  for pkg in libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev libdlpack-dev libseccomp-dev libssl-dev \
             opencl-c-headers libsqlite3-dev libcurl4-openssl-dev libseccomp2 libssl3 libsqlite3-0 bubblewrap; do
    dpkg-query -W -f='${Package} ${Version}\n' "$pkg" 2>/dev/null || true
  done
} > "$out/VERSIONS"
echo "vendor: $(du -sh "$out" | cut -f1) in $out"
