#!/usr/bin/env bash
# Builds bench/parent_work.cpp with the sources it measures (no CMake) and runs it: what the parent's work around one
# call costs (poison, canaries, input copy, capture, validation), the part of a block that is not the kernel.
# Usage: bench/run_parent_work.sh [REPS=400]     (takes ~5 s; run nothing else at the same time)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../src"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"${CXX:-c++}" -O2 -std=c++20 -Wall -Wextra -I"$src" -I"$here/../include" -o "$out/parent_work" "$here/parent_work.cpp" \
  "$src/oracle/tolerance.cpp" "$src/worker/shared_buffer.cpp" "$src/util/error.cpp" -lfmt
"$out/parent_work" "${1:-400}"
