#!/usr/bin/env bash
# bench/campaign_scale.sh [N=200] [KWB...]: what a campaign of N candidates asks of Slurm, and what its own loop
# costs, against the fake Slurm (tests/slurm/fake_slurm.py: jobs that run nothing, PENDING -> RUNNING -> FAILED on
# the wall clock, 50 nodes, 0.5 s pending, BENCH_RUN_S (default 2) s running, each job leaving exit status 1, so
# every job ends `failed` without a bundle and no kwb validate runs). For each kwb binary given (default
# build/ci/kwb; give an older build beside it for a before/after), it runs `kwb campaign run` on a campaign of N
# distinct candidates of the RMSNorm task through that fake, with poll_seconds = 1, and prints the number of sbatch,
# squeue, sacct, scontrol and scancel calls, the largest number of scheduler calls in one poll cycle (calls less than
# 0.5 s apart), the campaign's wall time, and kwb's own CPU time (user + system of the campaign process alone, from
# /proc at its end: the loop's work, without the fake scheduler's processes). Figures, not a test: exit 0 whenever
# kwb ran.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-200}
shift || true
BINARIES=("$@")
((${#BINARIES[@]})) || BINARIES=("$ROOT/build/ci/kwb")
WORK=$(mktemp -d /tmp/kwb-campaign-scale.XXXXXX)
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
export KWB_LEDGER=$WORK/ledger.sqlite KWB_KEY_DIR=$WORK/keys
python3 "$ROOT/tests/make_lite_task.py" "$ROOT/tasks/rmsnorm" "$WORK/rmsnorm" dram || exit 1
mkdir -p "$WORK/cands"
for ((i = 0; i < N; i++)); do
    { cat "$ROOT/tasks/rmsnorm/cpu/fused.cpp"; printf '\n// candidate %d\n' "$i"; } >"$WORK/cands/c$i.cpp"
done
printf '%-40s %6s %6s %6s %8s %7s %14s %8s %12s\n' kwb sbatch squeue sacct scontrol scancel "max calls/poll" \
    "wall s" "kwb CPU s"
for kwb in "${BINARIES[@]}"; do
    run=$WORK/run-$(basename "$(dirname "$kwb")")-$RANDOM
    mkdir -p "$run/fake"
    python3 "$ROOT/tests/slurm/fake_slurm.py" install "$run/fake" || exit 1
    cat >"$run/campaign.toml" <<EOF
name = "scale"
storage = "storage"
run_limit_minutes = 10
queue_limit_minutes = 60
[executor]
kind = "slurm"
poll_seconds = 1
[validate]
workloads = ["decode"]
no_profile = true
[[tasks]]
dir = "$WORK/rmsnorm"
candidates = ["$WORK/cands/"]
EOF
    t0=$(date +%s.%N)
    FAKE_SLURM_DIR=$run/fake FAKE_SLURM_NODES=50 FAKE_SLURM_PENDING_S=0.5 FAKE_SLURM_RUN_S=${BENCH_RUN_S:-2} \
        PATH="$run/fake/bin:$PATH" "$kwb" campaign run "$run/campaign.toml" >"$run/out.log" 2>"$run/err.log" &
    pid=$!
    cpu=0
    while kill -0 "$pid" 2>/dev/null; do
        # utime + stime (fields 14 and 15, clock ticks) of the campaign process itself, the last reading before it ends.
        c=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) && cpu=$c
        sleep 0.2
    done
    wait "$pid"
    rc=$?
    t1=$(date +%s.%N)
    if ((rc > 1)); then
        echo "kwb campaign run failed (exit $rc): $kwb; $run/err.log:" >&2
        tail -5 "$run/err.log" >&2
        continue
    fi
    python3 - "$run/fake/calls.log" "$kwb" "$t0" "$t1" "$cpu" "$(getconf CLK_TCK)" <<'PY'
import collections, sys
log, kwb = sys.argv[1], sys.argv[2]
t0, t1, ticks, hz = float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
rows = [line.split() for line in open(log) if line.strip()]
calls = [r[1] for r in rows]
n = collections.Counter(calls)
# A poll cycle: calls that follow each other within half a second (the loop sleeps poll_seconds = 1 between cycles).
longest, cycle, last = 0, 0, None
for r in rows:
    t = float(r[0])
    cycle = cycle + 1 if last is not None and t - last < 0.5 else 1
    last = t
    longest = max(longest, cycle)
print(f"{kwb[-40:]:40s} {n['sbatch']:6d} {n['squeue']:6d} {n['sacct']:6d} {n['scontrol']:8d} {n['scancel']:7d} "
      f"{longest:14d} {t1 - t0:8.1f} {ticks / hz:12.2f}")
PY
done
