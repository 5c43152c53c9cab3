#!/usr/bin/env bash
# bench/experiment_runs.sh WHICH [EXECUTOR] [KWB]: the experiments of docs/experiments.md with the shipped generators,
# timed end to end, on rmsnorm (without its DRAM case), softmax and layernorm, decode workload, short budgets.
#
#   WHICH     aa        tuner against a copy of itself, 3 tasks x 4 seeds x 1 attempt: must find no difference
#             tuner     random_edit (A) against tuner (B), 3 tasks x 4 seeds x 5 attempts: must find "tuner better"
#             cheater   cheater (A) against tuner (B), 3 tasks x 2 seeds x 5 attempts: every cheat caught, no keep
#   EXECUTOR  local (default) or slurm (starts the private single-node cluster of tests/slurm/cluster.sh)
#
# FINAL_MAX_MINUTES=M gives each trajectory's final comparison its own budget (final_max_minutes).
# Prints kwb experiment run's summary line, the wall time, and where the storage folder is (BENCH_OUT, default a
# new folder under /tmp, kept). Nothing else may run on the machine meanwhile: every validate times.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHICH=${1:?usage: bench/experiment_runs.sh aa|tuner|cheater [local|slurm] [KWB]}
EXECUTOR=${2:-local}
KWB=${3:-$ROOT/build/ci/kwb}
OUT=${BENCH_OUT:-$(mktemp -d /tmp/kwb-experiment-$WHICH.XXXXXX)}
mkdir -p "$OUT"
chmod 755 "$OUT"
python3 "$ROOT/tests/make_lite_task.py" "$ROOT/tasks/rmsnorm" "$OUT/tasks/rmsnorm" dram >/dev/null
cp -r "$ROOT/tasks/softmax" "$ROOT/tasks/layernorm" "$OUT/tasks/"
rm -rf "$OUT"/tasks/*/.kwb
G=$ROOT/generators

arm() {  # arm NAME GENERATOR
  case $2 in
    tuner) printf '[[arms]]\nname = "%s"\ncommand = ["python3", "tuner.py"]\nfiles = ["%s/tuner/tuner.py", "%s/tuner/templates"]\n' "$1" "$G" "$G" ;;
    random_edit) printf '[[arms]]\nname = "%s"\ncommand = ["python3", "random_edit.py"]\nfiles = ["%s/random_edit/random_edit.py"]\n' "$1" "$G" ;;
    cheater) printf '[[arms]]\nname = "%s"\ncommand = ["python3", "cheater.py"]\nfiles = ["%s/cheater/cheater.py"]\n' "$1" "$G" ;;
  esac
}

case $WHICH in
  aa) seeds="[1, 2, 3, 4]"; attempts=1; arms="$(arm tuner_a tuner; echo; arm tuner_b tuner)" ;;
  tuner) seeds="[1, 2, 3, 4]"; attempts=5; arms="$(arm random_edit random_edit; echo; arm tuner tuner)" ;;
  cheater) seeds="[1, 2]"; attempts=5; arms="$(arm cheater cheater; echo; arm tuner tuner)" ;;
  *) echo "bench/experiment_runs.sh: unknown experiment '$WHICH' (aa, tuner or cheater)" >&2; exit 64 ;;
esac

executor='kind = "local"'
if [[ $EXECUTOR == slurm ]]; then
  CLUSTER=$OUT/cluster
  trap 'bash "$ROOT/tests/slurm/cluster.sh" stop "$CLUSTER" >/dev/null 2>&1 || true' EXIT
  eval "$(bash "$ROOT/tests/slurm/cluster.sh" start "$CLUSTER")"
  executor=$'kind = "slurm"\npoll_seconds = 2'
fi

cat > "$OUT/experiment.toml" <<EOF
name = "$WHICH-$EXECUTOR"
storage = "storage"
seeds = $seeds
attempts = $attempts
$( [[ -n ${FINAL_MAX_MINUTES:-} ]] && echo "final_max_minutes = $FINAL_MAX_MINUTES" )
run_limit_minutes = 60
[executor]
$executor
[validate]
backend = "cpu"
workloads = ["decode"]
max_minutes = 0.1
layouts = 2
no_profile = true
[[tasks]]
dir = "tasks/rmsnorm"
[[tasks]]
dir = "tasks/softmax"
[[tasks]]
dir = "tasks/layernorm"
$arms
EOF
export KWB_KEY_DIR=$OUT/keys
start=$(date +%s.%N)
set +e
"$KWB" experiment run "$OUT/experiment.toml" 2> "$OUT/run.log"
rc=$?
set -e
end=$(date +%s.%N)
printf 'experiment %s via %s: exit %d, wall %.0f s; storage %s/storage; log %s/run.log\n' "$WHICH" "$EXECUTOR" \
  "$rc" "$(echo "$end - $start" | bc)" "$OUT" "$OUT"
