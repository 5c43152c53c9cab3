#!/usr/bin/env bash
# Builds bench/clock_overhead.cpp (no CMake) and runs it: the cost and granularity of each candidate clock.
# Usage: bench/run_clock_overhead.sh        (CXX=clang++ to use another compiler; takes ~5 s)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"${CXX:-c++}" -O2 -std=c++20 -Wall -Wextra -o "$out/clock_overhead" "$here/clock_overhead.cpp"
"$out/clock_overhead"
