#!/usr/bin/env bash
# The embedding task's realistic-size case, llama2_vocab (Llama-2-7B's token embedding: a 32000 x 4096 f16 table,
# 250 MiB, shared across a timing pool; 8 ids a call): wall time and peak memory of
#   1. kwb check of the cpu reference with the held-out cases (every published case, llama2_vocab included, and each
#      at a held-out shape: every checked call draws its own table), and
#   2. kwb validate of the reference against the baseline on that workload alone (checks, controls, A/A, A/B, final).
# Peak memory is the cgroup's (memory.max_usage_in_bytes: kwb and every worker and oracle it starts) where a cgroup v1
# memory controller can be made (root), else /usr/bin/time's largest resident set of kwb itself (less than the
# whole). The bank's tests check a copy without this case (tests/CMakeLists.txt, KWB_EMBEDDING_LITE).
# Usage: bench/embedding_llama2.sh        KWB_BENCH_MINUTES: validate's budget per workload (default 0.5)
# Takes ~2-3 minutes. Run nothing else at the same time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
minutes="${KWB_BENCH_MINUTES:-0.5}"
emb=tasks/embedding
cg=/sys/fs/cgroup/memory/kwb-bench-$$
measure() {  # measure NAME ARGS...: runs kwb ARGS, prints NAME, exit code, seconds and peak memory
  local name="$1" rc=0 t0 t1 peak
  shift
  t0="$(now)"
  if mkdir "$cg" 2>/dev/null; then
    echo 0 >"$cg/memory.max_usage_in_bytes"
    (echo "$BASHPID" >"$cg/cgroup.procs" && exec "$KWB" "$@" --json >"$out/$name.json" 2>"$out/$name.err") || rc=$?
    peak="$(($(cat "$cg/memory.max_usage_in_bytes") / 1048576)) MiB (cgroup)"
    rmdir "$cg" 2>/dev/null || true
  else
    /usr/bin/time -f '%M' -o "$out/$name.rss" "$KWB" "$@" --json >"$out/$name.json" 2>"$out/$name.err" || rc=$?
    peak="$(($(tail -1 "$out/$name.rss") / 1024)) MiB (kwb's own max RSS)"
  fi
  t1="$(now)"
  printf '%-9s exit %d  %6.1f s  peak %s\n' "$name" "$rc" "$(python3 -c "print($t1 - $t0)")" "$peak"
}
measure check check "$emb" --impl "$emb/cpu/reference.cpp" --held-out
measure validate validate "$emb" --candidate "$emb/cpu/reference.cpp" --workload llama2_vocab --max-minutes "$minutes" \
  --no-profile --output-dir "$out/bundle"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
c = json.load(open(f"{out}/check.json"))
llama = [k for k in c["cases"] if k["name"].startswith("llama2_vocab")]
print(f"check: {c['verdict']}, {len(c['cases'])} cases ({', '.join(k['name'] + ' ' + k['dims'] for k in llama)})")
v = json.load(open(f"{out}/validate.json"))
ab = (v.get("inputs", {}).get("ab") or [{}])[0]
fmt = lambda x: "-" if x is None else f"{x:+.1f}%"
print(f"validate: {v.get('decision')} {v.get('reason_codes')}, A/B {fmt(ab.get('improvement_pct'))} "
      f"[{fmt(ab.get('ci_low_pct'))}, {fmt(ab.get('ci_high_pct'))}] ({ab.get('verdict')})")
PY
echo "raw JSON: $out" >&2
