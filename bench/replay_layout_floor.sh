#!/usr/bin/env bash
# Builds bench/replay_layout_floor.cpp with the decision procedure's sources (no CMake) and replays, with and without
# the layout floor, every A/B workload of the compare --json files (NAME_*.json) in the folders given (e.g. bench/loop_keeps.sh's
# BENCH_OUT): what the floor (docs/timing.md, "The layout floor") would have changed in those sessions.
# Usage: bench/replay_layout_floor.sh DIR...     (seconds; it times nothing)
# REPLAY_AS="BAR MARGIN" replays them instead under that bar and margin, without and with the floor: e.g. the
# sessions bench/loop_keeps.sh ran under the old rule (bar 0, no margin), judged by today's defaults on their blocks.
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
    if [[ -n "${REPLAY_AS:-}" ]]; then
      read -r bar margin <<<"$REPLAY_AS"
      "$out/replay" --as "$bar" "$margin" "$dir/$kind"_*.json | tail -n "${REPLAY_TAIL:-8}"
    else
      "$out/replay" "$dir/$kind"_*.json | tail -n "${REPLAY_TAIL:-8}"
    fi
  done
done
