#!/usr/bin/env bash
# The README's main job: install what is missing, build, and judge the fused RMSNorm candidate against the
# multi-pass baseline on this machine's CPU, printing the decision. Extra arguments go to `kwb validate`.
#
# It times the decode and prefill workloads. The task's third, dram (128 MiB in, 128 MiB out per call), needs
# several minutes per comparison on a 2-vCPU machine (each call also moves 384 MiB through the parent for its
# inputs, poison and validation), so the demo leaves it out; `kwb validate tasks/rmsnorm --candidate ...` without
# --workload times all three.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs: kwb and the programs it starts (the test suites are not built).
build=$(bash scripts/build.sh ci kwb kwb-worker kwb-profile-worker kwb-confine)
out="${KWB_DEMO_OUT:-bundles/rmsnorm-fused-$(date +%Y%m%d-%H%M%S)}"
exec "$build/kwb" validate tasks/rmsnorm --candidate tasks/rmsnorm/cpu/fused.cpp --output-dir "$out" \
  --min-improvement-pct 10 --workload decode --workload prefill "$@"
