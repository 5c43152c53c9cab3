#!/usr/bin/env bash
# What an optimization loop keeps at the defaults (issue 41; docs/timing.md, "No practical difference"): N sessions
# of `kwb compare` per workload, at the default bar, margin and budget (only --workload and --seed given, seeds
# 1..N), for two kinds of candidate:
#   equal  fused.cpp against fused.cpp plus an exported, unused string: the same kernel in another binary (not
#          byte-identical, so it is timed). A PASS is a false keep; SAME is the answer a loop wants.
#   faster fused.cpp against tests/candidates/slow_by_work.cpp with its extra_work default set for about 5% on that
#          workload on this machine (calibrate, below: it records the choice and its readings). A PASS is a true keep.
# It prints, per workload and kind, the counts of PASS, SAME, FAIL and INCONCLUSIVE with 95% Wilson intervals, the
# median estimate and the median seconds to decide. Pass extra compare flags in KWB_BENCH_FLAGS (e.g.
# "--min-improvement-pct 0 --same-margin-pct 0" for the old defaults).
# Usage: bench/loop_keeps.sh [N=100] [WORKLOADS="decode prefill"]
# BENCH_FROM=K runs sessions K..N only, into a BENCH_OUT that holds 1..K-1 already (a run cut short, continued);
# the summary covers the sessions of 1..N whose JSON is in BENCH_OUT (a folder that lost seeds 1..K-1 summarizes
# K..N, and each row says how many it counts). BENCH_OUT records its host (host.txt: CPU and kernel) and refuses to be
# continued on another. BENCH_EXTRA_<workload> sets the faster candidate's extra work instead of calibrating it.
# Time: an equal session runs until SAME or the budget (about 40-60 s here), a faster one until PASS (seconds).
# Run nothing else at the same time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
n="${1:-100}"
workloads="${2:-decode prefill}"
read -r -a flags <<<"${KWB_BENCH_FLAGS:-}"
# One table, one host: a continued run (BENCH_FROM) on another CPU or kernel would mix effect sizes and noise.
host="$(grep -m5 -E '^(vendor_id|cpu family|model|stepping)' /proc/cpuinfo | tr -s ' \t' ' ' | paste -sd';'); $(nproc) CPUs; $(uname -r)"
if [[ -f "$out/host.txt" && "$(cat "$out/host.txt")" != "$host" ]]; then
  echo "bench/loop_keeps.sh: $out was measured on '$(cat "$out/host.txt")', this is '$host': start a new folder" >&2
  exit 2
fi
echo "$host" >"$out/host.txt"
lite="$out/rmsnorm"
python3 tests/make_lite_task.py "$task" "$lite" dram
note="$out/fused_note.cpp"
cp "$task/cpu/fused.cpp" "$note"
printf '\nextern "C" KWB_EXPORT const char kwb_bench_note[] = "the same kernel, another binary";\n' >>"$note"
# slow_by_work.cpp with the knob's default set to $2, written to $1. The task declares no extra_work scalar (its
# oracle takes eps alone), so the default is what changes.
make_slow() {
  python3 - tests/candidates/slow_by_work.cpp "$1" "$2" <<'PY'
import sys
src, dst, extra = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src).read()
old = 'kwb_scalar_or(&call, "extra_work", 1.0)'
assert text.count(old) == 1, "slow_by_work.cpp's extra_work default changed: update bench/loop_keeps.sh"
open(dst, "w").write(text.replace(old, f'kwb_scalar_or(&call, "extra_work", {extra})'))
PY
}
# The "5% faster" candidate's extra work on this machine: what a given effect costs depends on the CPU (a decode call
# is 1.3 us on this project's Zen 3 VM, under 1 us on Zen 5) and on how kwb charges. Unless $out/calibration_$w.json
# holds it already (a run continued with BENCH_FROM) or BENCH_EXTRA_<workload> says, it is found by steps of three
# compares of 300 blocks at the old bar, each of another seed (1001-1003, none of the sessions'), read as their median:
# one session's reading is its layout draw's (at one extra_work on the Xeon VM, 2.0% to 4.4%, one 19%), and a single
# 300-block reading put the choice off by a percent. Up to five steps: a first guess, then the secant through the last
# two medians (through the origin after the first), until one reads within 0.5% of 5%. The cost is not linear in
# extra_work on every CPU: the extra serial chain is independent of the row loop until its end, so a core with a deep
# reorder window hides part of it (on the Xeon VM 10 read +2.1% and 24.13 +8.4%, single readings). The choice is the
# step whose median came closest to 5%; every reading is recorded beside it.
calibrate() {
  local w="$1" guess="$2" file="$out/calibration_$1.json" given="BENCH_EXTRA_$1"
  if [[ -n "${!given:-}" ]]; then
    echo "${!given}"
    return
  fi
  if [[ -f "$file" ]]; then
    python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['extra_work'])" "$file"
    return
  fi
  local probe="$out/calibrate_$w.cpp" readings=() extra="$guess" pct prev_extra=0 prev_pct=0
  for step in 1 2 3 4 5; do
    make_slow "$probe" "$extra"
    local seed
    for seed in 1001 1002 1003; do
      # 300 blocks before the first look: no early stop on a first reading that happens to clear the bar.
      "$KWB" compare "$lite" --baseline "$probe" --candidate "$lite/cpu/fused.cpp" --workload "$w" --max-minutes 1 \
        --repetitions 300 --min-improvement-pct 0 --same-margin-pct 0 --seed "$seed" --json 2>/dev/null \
        >"$out/calibrate_${w}_${step}_$seed.json" || true
    done
    pct="$(python3 - "$out/calibrate_${w}_${step}"_100[123].json <<'PY'
import json, statistics, sys
print(statistics.median(json.load(open(f))["workloads"][0]["improvement_pct"] for f in sys.argv[1:]))
PY
)"
    readings+=("$extra:$pct")
    local next
    next="$(python3 - "$prev_extra" "$prev_pct" "$extra" "$pct" <<'PY'
import sys
x0, y0, x1, y1 = map(float, sys.argv[1:])
if abs(y1 - 5) < 0.5:
    print("done")
else:
    slope = (y1 - y0) / (x1 - x0) if x1 != x0 else 0.0
    if slope <= 0.01:
        slope = max(y1, 0.5) / x1  # through the origin: the first step, or a flat or noisy secant
    print(round(min(550.0, max(0.5, x1 + (5 - y1) / slope)), 2))
PY
)"
    [[ $next == "done" ]] && break
    prev_extra="$extra" prev_pct="$pct" extra="$next"
  done
  # The choice is the step whose median read closest to 5%, not the last guess (which may not have been measured).
  extra="$(python3 - "${readings[@]}" <<'PY'
import sys
print(min(sys.argv[1:], key=lambda r: abs(float(r.split(":")[1]) - 5)).split(":")[0])
PY
)"
  python3 - "$file" "$extra" "${readings[@]}" <<'PY'
import json, sys
path, extra, readings = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
json.dump({"extra_work": extra, "readings": [{"extra_work": float(r.split(":")[0]), "improvement_pct": float(r.split(":")[1])}
                                              for r in readings]}, open(path, "w"), indent=1)
PY
  echo "$extra"
}
for w in $workloads; do
  guess=5
  [[ $w == decode ]] && guess=10
  extra="$(calibrate "$w" "$guess")"
  source_of_extra="$out/calibration_$w.json"
  given="BENCH_EXTRA_$w"
  [[ -n "${!given:-}" ]] && source_of_extra="$given"
  echo "$w: slow_by_work with extra_work = $extra ($source_of_extra)" >&2
  slow="$out/slow_by_work_$w.cpp"
  make_slow "$slow" "$extra"
  for ((i = ${BENCH_FROM:-1}; i <= n; i++)); do
    run_kwb "equal_${w}_$i" compare "$lite" --baseline "$lite/cpu/fused.cpp" --candidate "$note" --workload "$w" \
      --seed "$i" "${flags[@]}" 2>/dev/null
    run_kwb "faster_${w}_$i" compare "$lite" --baseline "$slow" --candidate "$lite/cpu/fused.cpp" --workload "$w" \
      --seed "$i" "${flags[@]}" 2>/dev/null
  done
done
python3 - "$out" "$n" "$workloads" "${KWB_BENCH_FLAGS:-defaults}" <<'PY'
import json, math, os, statistics, sys
sys.path.insert(0, "bench")
from summary import table
out, n, workloads, flags = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]

def wilson(k, n, z=1.96):
    p, d = k / n, 1 + z * z / n
    c, h = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)

rows = []
for w in workloads:
    for kind in ("equal", "faster"):
        files = [f"{out}/{kind}_{w}_{i}.json" for i in range(1, n + 1)]
        runs = [json.load(open(f))["workloads"][0] for f in files if os.path.exists(f)]
        if not runs:
            continue
        verdicts = [r["verdict"] for r in runs]
        est = [r["improvement_pct"] for r in runs if isinstance(r.get("improvement_pct"), (int, float))]
        secs = [r["seconds"] for r in runs]
        k, m = verdicts.count("PASS"), len(runs)
        lo, hi = wilson(k, m)
        rows.append([w, kind, f"{k}/{m} [{100 * lo:.0f}%, {100 * hi:.0f}%]", verdicts.count("SAME"),
                     verdicts.count("FAIL"), verdicts.count("INCONCLUSIVE"), verdicts.count("INVALID"),
                     f"{statistics.median(est):+.2f}%" if est else "-", f"{statistics.median(secs):.1f}"])
print(f"\nkept (PASS) of the sessions 1..{n} in {out} (a seed whose JSON is missing is left out), compare flags: {flags}")
table(["workload", "candidate", "PASS (kept) [95% Wilson]", "SAME", "FAIL", "INCONCLUSIVE", "INVALID",
       "median estimate", "median s"], rows)
for w in workloads:
    try:
        c = json.load(open(f"{out}/calibration_{w}.json"))
        print(f"{w}: the faster candidate's extra_work {c['extra_work']}, calibration readings "
              + ", ".join(f"{r['extra_work']} -> {r['improvement_pct']:+.2f}%" for r in c["readings"]))
    except FileNotFoundError:
        pass
print(f"host: {open(f'{out}/host.txt').read().strip()}")
print(f"raw JSON: {out}")
PY
