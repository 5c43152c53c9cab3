#!/usr/bin/env bash
# OpenCL A/A noise floor and fused-vs-baseline on PoCL's CPU device (whatever OpenCL device the machine has), with
# PoCL's default worker-thread count and with POCL_MAX_PTHREAD_COUNT=1. On a machine with few cores the host thread
# that waits in clFinish and PoCL's workers share them, and that contention is noise (docs/backends.md).
# Usage: bench/opencl_aa.sh            KWB_BENCH_MINUTES=0.1 for a quick smoke run (default 0.5 = 30 s per workload)
# Takes ~5 min with the default budget. Run nothing else at the same time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
minutes="${KWB_BENCH_MINUTES:-0.5}"
for threads in default 1; do
  if [[ "$threads" == 1 ]]; then export POCL_MAX_PTHREAD_COUNT=1; else unset POCL_MAX_PTHREAD_COUNT; fi
  echo "== opencl A/A, PoCL threads: $threads (budget $minutes min per workload)" >&2
  run_kwb "aa_$threads" compare "$task" --backend opencl --aa --workload decode --workload prefill \
    --max-minutes "$minutes"
  echo "== opencl fused vs baseline, PoCL threads: $threads" >&2
  run_kwb "ab_$threads" compare "$task" --backend opencl --candidate "$task/opencl/fused.cpp" --workload decode \
    --workload prefill --max-minutes "$minutes"
done
python3 - "$out" <<'PY'
import json, os, sys
sys.path.insert(0, "bench")
from summary import pct, interval, half_width, table
out, rows = sys.argv[1], []
for threads in ["default", "1"]:
    for kind in ["aa", "ab"]:
        with open(os.path.join(out, f"{kind}_{threads}.json")) as f:
            doc = json.load(f)
        for w in doc["workloads"]:
            hw = half_width(w)
            rows.append([threads, "A/A (A' vs A)" if kind == "aa" else "fused vs baseline", w["name"],
                         pct(w.get("improvement_pct")), interval(w), "-" if hw is None else f"{hw:.2f}%",
                         w["blocks"], f"{w['seconds']:.1f}", w["verdict"]])
print("\nopencl backend; + = the second arm faster")
table(["PoCL threads", "comparison", "workload", "difference", "interval", "half-width", "blocks", "seconds",
       "verdict"], rows)
print(f"raw JSON: {out}")
PY
