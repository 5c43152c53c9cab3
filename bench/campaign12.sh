#!/usr/bin/env bash
# bench/campaign12.sh [local|slurm] [BUILD_DIR]: a campaign of 12 candidates with known outcomes over two tasks,
# RMSNorm (without its DRAM case) and softmax, decode only, small budgets. Per task: the reference (KEEP_CANDIDATE),
# a copy of the baseline (not KEEP_CANDIDATE) and four of the task's error controls, each a mutant of a correct
# kernel (KEEP_BASELINE). Prints each job's decision, the campaign's wall time, and with slurm the overhead per job
# (wall time less the jobs' own run time, over the jobs). slurm starts a private cluster (tests/slurm/cluster.sh,
# root on Debian 12) and stops it. Figures, not a test: it exits 0 whenever kwb ran.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EXECUTOR=${1:-local}
BUILD=${2:-$ROOT/build/ci}
KWB=$BUILD/kwb
WORK=$(mktemp -d /tmp/kwb-campaign12.XXXXXX)
chmod 755 "$WORK"  # kwb run as root runs its workers as users of their own, which must reach the bundles
trap 'bash "$ROOT/tests/slurm/cluster.sh" stop "$WORK/cluster" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
if [[ $EXECUTOR == slurm ]]; then
    env_line=$(bash "$ROOT/tests/slurm/cluster.sh" start "$WORK/cluster") || exit $?
    eval "$env_line"
fi
export KWB_LEDGER=$WORK/ledger.sqlite KWB_KEY_DIR=$WORK/keys
python3 "$ROOT/tests/make_lite_task.py" "$ROOT/tasks/rmsnorm" "$WORK/rmsnorm" dram || exit 1
cp -r "$ROOT/tasks/softmax" "$WORK/softmax"
mkdir -p "$WORK/rmsnorm-cands" "$WORK/softmax-cands"
cp "$ROOT/tasks/rmsnorm/cpu/fused.cpp" "$WORK/rmsnorm-cands/fused.cpp"
cp "$ROOT/tasks/rmsnorm/cpu/baseline.cpp" "$WORK/rmsnorm-cands/baseline_copy.cpp"
for c in no_eps no_weight wrong_axis zeros; do cp "$ROOT/tasks/rmsnorm/cpu/controls/$c.cpp" "$WORK/rmsnorm-cands/"; done
cp "$ROOT/tasks/softmax/cpu/online.cpp" "$WORK/softmax-cands/online.cpp"
cp "$ROOT/tasks/softmax/cpu/baseline.cpp" "$WORK/softmax-cands/baseline_copy.cpp"
for c in no_max_subtraction sum_off_by_one wrong_axis zeros; do
    cp "$ROOT/tasks/softmax/cpu/controls/$c.cpp" "$WORK/softmax-cands/"
done
cat > "$WORK/campaign.toml" <<EOF
name = "campaign12-$EXECUTOR"
storage = "storage"
run_limit_minutes = 10
queue_limit_minutes = 60
[executor]
kind = "$EXECUTOR"
poll_seconds = 1
[validate]
workloads = ["decode"]
max_minutes = 0.1
max_aa_difference_pct = 5
min_improvement_pct = 5
layouts = 2
no_profile = true
seed = 11
[[tasks]]
dir = "rmsnorm"
candidates = ["rmsnorm-cands/"]
[[tasks]]
dir = "softmax"
candidates = ["softmax-cands/"]
EOF
start=$(date +%s.%N)
"$KWB" campaign run "$WORK/campaign.toml" > "$WORK/run.out" 2> "$WORK/run.err"
end=$(date +%s.%N)
"$KWB" campaign status "$WORK/storage" --json > "$WORK/status.json"
python3 - "$WORK/status.json" "$start" "$end" "$EXECUTOR" <<'EOF'
import json, os, sys
s = json.load(open(sys.argv[1]))
wall = float(sys.argv[3]) - float(sys.argv[2])
ran = sum(j["ran_seconds"] for j in s["jobs"])
for j in sorted(s["jobs"], key=lambda j: (j["task"], os.path.basename(j["candidate"]))):
    print(f"{j['task']:<8} {os.path.basename(j['candidate']):<24} {j['executor']:<6} {j['handle']:>7} "
          f"{j['outcome']:<9} {j['decision'] or '-':<15} ran {j['ran_seconds']:6.1f} s")
n = len(s["jobs"])
print(f"{sys.argv[4]}: {n} jobs, wall {wall:.1f} s, validate {ran:.1f} s, overhead {(wall - ran) / max(n, 1):.2f} s/job")
EOF
