#!/usr/bin/env bash
# Builds bench/replay_layout_floor.cpp with the decision procedure's sources (no CMake) and replays, with and without
# the layout floor, every A/B workload of the compare --json files (NAME_*.json) in the folders given (e.g. bench/loop_keeps.sh's
# BENCH_OUT): what the floor (docs/timing.md, "The layout floor") would have changed in those sessions.
# Usage: bench/replay_layout_floor.sh DIR...     (seconds; it times nothing)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../src"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"${CXX:-c++}" -O2 -std=c++20 -Wall -Wextra -I"$src" -o "$out/replay" "$here/replay_layout_floor.cpp" \
  "$src"/stats/*.cpp -lfmt
# One summary per folder and file kind (the name up to its first "_": loop_keeps.sh's equal_* and faster_*).
for dir in "$@"; do
  kinds="$(find "$dir" -maxdepth 1 -name '*_*.json' ! -name 'calibrat*' -printf '%f\n' | sed 's/_.*//' | sort -u)"
  for kind in $kinds; do
    echo "== $dir $kind"
    "$out/replay" "$dir/$kind"_*.json | tail -n "${REPLAY_TAIL:-8}"
  done
done
