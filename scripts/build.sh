#!/usr/bin/env bash
# Configures and builds kwb with a CMake preset (default: ci). Prints the build folder's path on success.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" >&2
echo "build/$preset"
