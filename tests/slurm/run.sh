#!/usr/bin/env bash
# tests/slurm/run.sh [BUILD_DIR]: kwb campaign through Slurm, end to end, on this machine.
#
# Starts a private single-node Slurm cluster (tests/slurm/cluster.sh: munge, slurmctld, slurmd under one folder),
# runs a campaign of five candidates on the RMSNorm task (decode only, small budgets) through one sbatch --array,
# one exclusive array task per candidate, and checks the five outcomes in the campaign's state and in the ledger:
#   fused.cpp           the task's fused reference                       decided KEEP_CANDIDATE
#   no_eps.cpp          one of the task's error controls                 decided KEEP_BASELINE (fails its check)
#   input_mutation.cpp  tests/adversarial/: writes into its sealed input  decided KEEP_BASELINE (fails its check)
#   baseline_copy.cpp   the baseline's bytes under another name          decided KEEP_BASELINE (identical, untimed)
#   over_run_limit.cpp  fused.cpp that spins ~1 s per call (patch below)  timeout: past the 24-second run limit
# It prints every job's Slurm id and outcome, the campaign's wall time and Slurm's overhead per job, and stops the
# cluster. Exit 0 when all five are as expected, 1 when one is not, 77 when the Slurm daemons cannot start here
# (cluster.sh says why), 2 when kwb is not built.
#
# tests/slurm/run.sh BUILD_DIR --untimed: the four without fused.cpp, which are all decided (or stopped) before any
# timing stage, so that the run may go beside other work: CTest runs it so (campaign_slurm), with the parallel
# tests. The fused reference's timed validate is what a Slurm job does like any other validate (campaign_test's
# timed tests take a campaign through it on the local executor).
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build/ci}
UNTIMED=0
if [[ ${2:-} == --untimed ]]; then UNTIMED=1; fi
KWB=$BUILD/kwb
if [[ ! -x $KWB ]]; then
    echo "tests/slurm/run.sh: no kwb at $KWB: build first (scripts/build.sh ci), or give the build folder" >&2
    exit 2
fi
WORK=$(mktemp -d /tmp/kwb-slurm-run.XXXXXX)
chmod 755 "$WORK"  # kwb run as root runs its workers as users of their own, which must reach the bundles
CLUSTER=$WORK/cluster
stop_cluster() { bash "$ROOT/tests/slurm/cluster.sh" stop "$CLUSTER" >/dev/null 2>&1 || true; }
trap 'stop_cluster; rm -rf "$WORK"' EXIT

env_line=$(bash "$ROOT/tests/slurm/cluster.sh" start "$CLUSTER")
rc=$?
if ((rc == 77)); then
    echo "tests/slurm/run.sh: SKIPPED: the Slurm daemons cannot start on this machine (cluster.sh exit 77, its" \
         "reason above); nothing was tested" >&2
    exit 77
elif ((rc != 0)); then
    echo "tests/slurm/run.sh: FAILED: the cluster did not come up (cluster.sh exit $rc)" >&2
    exit 1
fi
eval "$env_line"

# The campaign's own ledger and key folder: every job runs as this user on this node, so its bundles are signed by
# the key the campaign trusts as its own (docs/campaigns.md, "Authentication").
export KWB_LEDGER=$WORK/ledger.sqlite KWB_KEY_DIR=$WORK/keys
python3 "$ROOT/tests/make_lite_task.py" "$ROOT/tasks/rmsnorm" "$WORK/rmsnorm" dram || exit 1
mkdir -p "$WORK/cands"
cp "$ROOT/tasks/rmsnorm/cpu/fused.cpp" "$WORK/cands/fused.cpp"
cp "$ROOT/tasks/rmsnorm/cpu/controls/no_eps.cpp" "$WORK/cands/no_eps.cpp"
cp "$ROOT/tasks/rmsnorm/cpu/baseline.cpp" "$WORK/cands/baseline_copy.cpp"
# The mutant, as a patch of the reference: the same (correct) kernel, made slow by a spin at the top of every call,
# so that its checks alone (40 calls, then the final re-check) outlast the run limit.
python3 - "$ROOT/tasks/rmsnorm/cpu/fused.cpp" "$WORK/cands/over_run_limit.cpp" <<'EOF'
import sys
src = open(sys.argv[1]).read()
old = "extern \"C\" KWB_EXPORT int kwb_run(const kwb_call* call) {\n"
assert src.count(old) == 1, "fused.cpp's kwb_run changed: update tests/slurm/run.sh's patch"
new = old + "  for (volatile long spin = 0; spin < 1000000000L; spin = spin + 1) {\n  }\n"
open(sys.argv[2], "w").write(src.replace(old, new))
EOF

fused='"cands/fused.cpp", '
if ((UNTIMED)); then fused=''; fi
cat > "$WORK/campaign.toml" <<EOF
name = "slurm-five"
storage = "storage"
run_limit_minutes = 0.4
queue_limit_minutes = 20

[executor]
kind = "slurm"
poll_seconds = 2

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
candidates = [$fused"cands/no_eps.cpp", "$ROOT/tests/adversarial/input_mutation.cpp",
              "cands/baseline_copy.cpp", "cands/over_run_limit.cpp"]
EOF

start=$(date +%s.%N)
"$KWB" campaign run "$WORK/campaign.toml"
campaign_rc=$?
end=$(date +%s.%N)
"$KWB" campaign status "$WORK/storage" --json > "$WORK/status.json" || exit 1
"$KWB" history "$WORK/rmsnorm" --runs --kind validate --json > "$WORK/ledger.json" || exit 1

python3 - "$WORK/status.json" "$WORK/ledger.json" "$start" "$end" "$campaign_rc" "$UNTIMED" <<'EOF'
import json, os, sys
status, ledger = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
wall, campaign_rc, untimed = float(sys.argv[4]) - float(sys.argv[3]), int(sys.argv[5]), sys.argv[6] == "1"
expected = {} if untimed else {"fused.cpp": ("decided", {"KEEP_CANDIDATE"})}
expected |= {
    "no_eps.cpp": ("decided", {"KEEP_BASELINE"}),
    "input_mutation.cpp": ("decided", {"KEEP_BASELINE"}),
    "baseline_copy.cpp": ("decided", {"KEEP_BASELINE"}),  # identical_to_baseline, decided untimed
    "over_run_limit.cpp": ("timeout", {""}),
}
recorded = {r["bundle"] for r in ledger["runs"]}
failures, ran, arrays = [], 0.0, set()
print(f"{'candidate':<20} {'slurm job':>9}  {'node':<8} {'outcome':<9} {'decision':<15} {'queued s':>8} {'ran s':>7}  why")
for job in status["jobs"]:
    name = os.path.basename(job["candidate"])
    ran += job["ran_seconds"]
    print(f"{name:<20} {job['handle']:>9}  {job.get('node') or '-':<8} {job['outcome']:<9} {job['decision'] or '-':<15} "
          f"{job['queued_seconds']:8.1f} {job['ran_seconds']:7.1f}  {job['detail']}")
    want_outcome, want_decisions = expected.pop(name, (None, None))
    if want_outcome is None:
        failures.append(f"{name}: not a candidate of this campaign")
    elif job["outcome"] != want_outcome or job["decision"] not in want_decisions:
        failures.append(f"{name}: {job['outcome']} {job['decision']}, expected {want_outcome} {sorted(want_decisions)}")
    array, _, task = job["handle"].partition("_")
    if job["executor"] != "slurm" or not array.isdigit() or not task.isdigit():
        failures.append(f"{name}: not run as a Slurm array task ({job['executor']} {job['handle']})")
    arrays.add(array)
    if job["outcome"] == "decided" and not job.get("node"):
        failures.append(f"{name}: decided, but no node recorded")
    if job["outcome"] == "decided" and not job.get("machine"):
        failures.append(f"{name}: decided, but no machine recorded from its bundle")
    if (job["outcome"] == "decided") != (job["bundle"] in recorded):
        failures.append(f"{name}: in the ledger: {job['bundle'] in recorded}, outcome {job['outcome']}")
failures += [f"{name}: no job" for name in expected]
if len(arrays) != 1:  # one wave: one sbatch --array for the five
    failures.append(f"the jobs ran in {len(arrays)} Slurm arrays ({sorted(arrays)}), expected one")
if campaign_rc != 1:  # one job (the run-limit one) ends without a decision
    failures.append(f"kwb campaign run exited {campaign_rc}, expected 1")
n = len(status["jobs"])
print(f"\ncampaign wall time {wall:.1f} s for {n} jobs run one at a time (--exclusive on one node); validate itself "
      f"{ran:.1f} s; Slurm's and the campaign's overhead {(wall - ran) / max(n, 1):.1f} s per job")
for f in failures:
    print("FAIL", f)
print("tests/slurm/run.sh:", "FAILED" if failures else "PASSED")
sys.exit(1 if failures else 0)
EOF
