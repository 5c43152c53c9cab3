#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test (CTest + GoogleTest).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"
bash scripts/build.sh "$preset" >/dev/null
ctest --preset "$preset" -j "$(nproc)"
