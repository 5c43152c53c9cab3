#!/usr/bin/env bash
# Builds every target without unity, with the dev preset (build/dev): each source and test file must compile on its
# own, including what it uses. CI builds the ci preset, a unity build, in which a file can lean on what another file
# of its chunk included or declared and still compile; this is the build that catches it. Run it before sending a
# change that adds or moves includes, declarations or files. Uses ccache when it is installed.
# Usage: scripts/check_nonunity.sh [extra cmake configure arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake --preset dev "${launcher[@]}" "$@" >/dev/null
cmake --build --preset dev
echo "scripts/check_nonunity.sh: every target builds without unity (build/dev)"
