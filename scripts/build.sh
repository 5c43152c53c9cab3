#!/usr/bin/env bash
# Configures and builds kwb with a CMake preset (default: ci), every target or only those named after the preset.
# Prints the build folder's path on success.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"
shift || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" "${targets[@]}" >&2
echo "build/$preset"
