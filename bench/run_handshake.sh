#!/usr/bin/env bash
# Builds bench/handshake.cpp (no CMake) and runs it: what the trusted-timing handshake adds to every sample, and the
# worker CPU outside the window that work_outside_timer bounds. Run as root, or with kernel.perf_event_paranoid <= 2.
# Usage: bench/run_handshake.sh [CALLS=20000]     (takes ~5 s; run nothing else at the same time)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"${CXX:-c++}" -O2 -std=c++20 -Wall -Wextra -I"$here/../src" -I"$here/../include" -o "$out/handshake" "$here/handshake.cpp"
"$out/handshake" "${1:-20000}"
