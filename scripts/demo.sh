#!/usr/bin/env bash
# The README's main job: install what is missing, build, and judge the fused RMSNorm candidate against the
# multi-pass baseline on this machine's CPU, printing the decision. Extra arguments go to `kwb validate`.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(bash scripts/build.sh ci)
out="${KWB_DEMO_OUT:-bundles/rmsnorm-fused-$(date +%Y%m%d-%H%M%S)}"
exec "$build/kwb" validate tasks/rmsnorm --candidate tasks/rmsnorm/cpu/fused.cpp --output-dir "$out" \
  --min-improvement-pct 10 "$@"
