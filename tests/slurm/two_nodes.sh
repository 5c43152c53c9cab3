#!/usr/bin/env bash
# tests/slurm/two_nodes.sh [BUILD_DIR]: a kwb campaign on a Slurm cluster of two nodes, on this machine.
#
# Each node is a slurmd in a network namespace of its own (n1 at 10.213.X.2, n2 at 10.213.X.3), on a private
# bridge with slurmctld at 10.213.X.1: only the addresses this script creates. Each node gives its jobs a key folder
# of its own (a TaskProlog exports KWB_KEY_DIR=DIR/keys-<node>), so each signs its bundles with its own key, as nodes
# of a real cluster with node-local key folders do. The campaign process has its own key folder and at first trusts
# only n1's key (`kwb campaign trust`).
#
# The campaign: four error controls of the RMSNorm task (each decided KEEP_BASELINE at its check, nothing timed),
# two at a time (one per node, --exclusive). It checks:
#   1. the jobs ran as one array spread over both nodes, each job's node recorded (squeue's NodeList);
#   2. a bundle signed by n1 is accepted (decided, its signer n1's key);
#   3. a bundle signed by n2, a node not enrolled, is refused as rejected evidence ("not authentic");
#   4. after `kwb campaign trust` of n2's key, the next run decides every job, and n2's bundles are accepted.
# It prints every job's Slurm id, node, outcome and signer. Exit 0 when all holds, 1 when something does not, 77 when
# two nodes cannot be set up here (not root, no `ip`, no network namespaces or bridge, Slurm not installable: the
# reason is printed), 2 when kwb is not built.
set -u -o pipefail
export PATH=$PATH:/usr/sbin:/sbin

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build/ci}
KWB=$BUILD/kwb
[[ -x $KWB ]] || { echo "two_nodes.sh: no kwb at $KWB: build first (scripts/build.sh ci)" >&2; exit 2; }
skip() { echo "tests/slurm/two_nodes.sh: SKIPPED: $*; nothing was tested" >&2; exit 77; }
((EUID == 0)) || skip "must run as root (network namespaces, slurmd)"
command -v ip >/dev/null || skip "no 'ip' (iproute2)"

WORK=$(mktemp -d /tmp/kwb-2node.XXXXXX)
chmod 755 "$WORK"  # kwb run as root runs its workers as users of their own, which must reach the bundles
TAG=$$
BR=kwbbr$TAG
NET="10.213.$((TAG % 200 + 20))"
NS=(kwbn1-$TAG kwbn2-$TAG)
NODES=(n1 n2)
MDIR=$WORK/munge
CONF=$WORK/slurm.conf
export SLURM_CONF=$CONF

teardown() {
    local f pid
    if [[ -f $WORK/run/slurmctld.pid ]]; then
        timeout 10 scancel --user=root >/dev/null 2>&1 || true
    fi
    for f in "$WORK"/run/*.pid "$MDIR/munged.pid"; do
        [[ -f $f ]] || continue
        pid=$(cat "$f" 2>/dev/null) && kill -TERM "$pid" 2>/dev/null
    done
    sleep 1
    for f in "$WORK"/run/*.pid "$MDIR/munged.pid"; do
        [[ -f $f ]] || continue
        pid=$(cat "$f" 2>/dev/null) && kill -KILL "$pid" 2>/dev/null
    done
    for ns in "${NS[@]}"; do
        # Anything left in the namespace (a job's processes) goes with it.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    ip link del "$BR" 2>/dev/null
    rm -rf "$WORK"
}
trap teardown EXIT
[[ -n ${KWB_TWO_NODES_KEEP:-} ]] && trap - EXIT  # debugging: leave it all

# ---- the network: a bridge and two namespaces -------------------------------------------------------------------
ip link add "$BR" type bridge 2>"$WORK/ip.err" || skip "cannot create a bridge: $(cat "$WORK/ip.err")"
ip addr add "$NET.1/24" dev "$BR" && ip link set "$BR" up || skip "cannot configure the bridge"
for i in 0 1; do
    ns=${NS[$i]}
    ip netns add "$ns" 2>"$WORK/ip.err" || skip "cannot create a network namespace: $(cat "$WORK/ip.err")"
    ip link add "v$TAG$i" type veth peer name "p$TAG$i" || skip "cannot create a veth pair"
    ip link set "p$TAG$i" netns "$ns"
    ip link set "v$TAG$i" master "$BR" up
    ip -n "$ns" addr add "$NET.$((i + 2))/24" dev "p$TAG$i"
    ip -n "$ns" link set "p$TAG$i" up
    ip -n "$ns" link set lo up
done

# ---- munge, slurmctld, two slurmd ----------------------------------------------------------------------------------
bash "$ROOT/tests/slurm/cluster.sh" install "$WORK" >&2 || skip "Slurm and munge cannot be installed here"
for c in munged mungekey slurmctld slurmd sbatch squeue; do
    command -v "$c" >/dev/null || skip "'$c' missing (tests/slurm/cluster.sh start installs Slurm and munge)"
done
mkdir -p "$MDIR" "$WORK/run" "$WORK/log" "$WORK/state" "$WORK/spool"
chmod 700 "$MDIR"
mungekey -c -k "$MDIR/munge.key" 2>/dev/null || dd if=/dev/urandom of="$MDIR/munge.key" bs=1024 count=1 status=none
chmod 400 "$MDIR/munge.key"
munged --force --socket="$MDIR/munge.socket" --key-file="$MDIR/munge.key" --pid-file="$MDIR/munged.pid" \
    --log-file="$MDIR/munged.log" --seed-file="$MDIR/munged.seed" || skip "munged did not start"
nodeline=$(slurmd -C 2>/dev/null | grep -m1 '^NodeName=') || skip "'slurmd -C' cannot read the hardware"
nodeline=${nodeline#NodeName=* }
host=$(uname -n)
host=${host%%.*}
cat >"$WORK/task_prolog.sh" <<EOF
#!/bin/sh
# Each node's jobs sign with the node's own key (a node-local key folder on a real cluster).
echo "export KWB_KEY_DIR=$WORK/keys-\$SLURMD_NODENAME"
EOF
chmod 755 "$WORK/task_prolog.sh"
cat >"$CONF" <<EOF
# tests/slurm/two_nodes.sh: two slurmd, each in its own network namespace.
ClusterName=kwbtwo
SlurmctldHost=$host($NET.1)
SlurmctldPort=${KWB_SLURM_CTLD_PORT:-6917}
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MDIR/munge.socket
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog=$WORK/task_prolog.sh
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
KillWait=5
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool/%n
SlurmctldPidFile=$WORK/run/slurmctld.pid
SlurmdPidFile=$WORK/run/slurmd-%n.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd-%n.log
NodeName=n1 NodeAddr=$NET.2 $nodeline State=UNKNOWN
NodeName=n2 NodeAddr=$NET.3 $nodeline State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -f "$CONF" >"$WORK/log/slurmctld.stderr" 2>&1 </dev/null || {
    tail -n 5 "$WORK/log/slurmctld.stderr" "$WORK/log/slurmctld.log" >&2
    skip "slurmctld did not start"
}
for i in 0 1; do
    # nsenter, not `ip netns exec`: only the network namespace changes (ip netns exec also remounts /sys, which
    # hides /sys/fs/cgroup from slurmd).
    mkdir -p "$WORK/spool/${NODES[$i]}"
    nsenter --net="/run/netns/${NS[$i]}" slurmd -f "$CONF" -N "${NODES[$i]}" \
        >"$WORK/log/slurmd-${NODES[$i]}.stderr" 2>&1 </dev/null || {
        tail -n 5 "$WORK/log/slurmd-${NODES[$i]}.stderr" "$WORK/log/slurmd-${NODES[$i]}.log" >&2
        skip "slurmd ${NODES[$i]} did not start in its namespace"
    }
done
up=0
for ((t = 0; t < 60; t++)); do
    idle=$(timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle')
    ((idle == 2)) && { up=1; break; }
    sleep 0.5
done
if ((!up)); then
    timeout 5 sinfo -N >&2
    tail -n 5 "$WORK"/log/*.log >&2
    skip "the two nodes did not both become idle within 30 s"
fi
echo "two nodes up: $(timeout 5 sinfo -h -N -o '%N=%T' | tr '\n' ' ')(bridge $BR, $NET.0/24)"

# ---- keys: the campaign's own, n1's enrolled, n2's not --------------------------------------------------------------
export KWB_LEDGER=$WORK/ledger.sqlite KWB_KEY_DIR=$WORK/keys-campaign
KWB_KEY_DIR=$WORK/keys-n1 "$KWB" doctor --json >"$WORK/doctor-n1.json" 2>/dev/null  # makes n1's key
"$KWB" campaign trust "$WORK/keys-n1/machine.pub" --name n1 || exit 1
n1_key=$(cat "$WORK/keys-n1/machine.pub")

# ---- the campaign ---------------------------------------------------------------------------------------------------
python3 "$ROOT/tests/make_lite_task.py" "$ROOT/tasks/rmsnorm" "$WORK/rmsnorm" dram || exit 1
mkdir -p "$WORK/cands"
for c in no_eps no_weight wrong_axis zeros; do cp "$ROOT/tasks/rmsnorm/cpu/controls/$c.cpp" "$WORK/cands/"; done
cat >"$WORK/campaign.toml" <<EOF
name = "two-nodes"
storage = "storage"
run_limit_minutes = 5
queue_limit_minutes = 10
[executor]
kind = "slurm"
poll_seconds = 1
[validate]
workloads = ["decode"]
max_minutes = 0.1
layouts = 2
no_profile = true
[[tasks]]
dir = "rmsnorm"
candidates = ["cands/"]
EOF
"$KWB" campaign run "$WORK/campaign.toml" >"$WORK/run1.out" 2>"$WORK/run1.err"
rc1=$?
"$KWB" campaign status "$WORK/storage" --json >"$WORK/status1.json" || exit 1
n2_key=$(cat "$WORK/keys-n2/machine.pub" 2>/dev/null)
[[ -n $n2_key ]] || { echo "FAIL: n2 never made its key (did a job run there?)"; tail -20 "$WORK/run1.err"; exit 1; }
"$KWB" campaign trust "$WORK/keys-n2/machine.pub" --name n2 || exit 1
"$KWB" campaign run "$WORK/campaign.toml" >"$WORK/run2.out" 2>"$WORK/run2.err"
rc2=$?
"$KWB" campaign status "$WORK/storage" --json >"$WORK/status2.json" || exit 1
"$KWB" campaign report "$WORK/storage" >/dev/null || exit 1

python3 - "$WORK/status1.json" "$WORK/status2.json" "$n1_key" "$n2_key" "$rc1" "$rc2" "$WORK/storage/report.md" <<'EOF'
import json, os, sys
s1, s2 = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
keys = {sys.argv[3]: "n1", sys.argv[4]: "n2"}
rc1, rc2, report = int(sys.argv[5]), int(sys.argv[6]), open(sys.argv[7]).read()
failures = []
def show(title, status):
    print(f"\n{title}")
    print(f"{'candidate':<16} {'slurm job':>10} {'node':<5} {'outcome':<9} {'decision':<14} {'signer':<6} why")
    for j in status["jobs"]:
        print(f"{os.path.basename(j['candidate']):<16} {j['handle']:>10} {j.get('node') or '-':<5} {j['outcome']:<9} "
              f"{j['decision'] or '-':<14} {keys.get(j.get('signer', ''), j.get('signer', '')[:8] or '-'):<6} "
              f"{j['detail'][:110]}")
show("run 1 (n1 enrolled, n2 not):", s1)
show("run 2 (after kwb campaign trust of n2's key):", s2)
jobs1 = s1["jobs"]
nodes = {j.get("node") for j in jobs1}
if nodes != {"n1", "n2"}:
    failures.append(f"run 1's jobs ran on {sorted(map(str, nodes))}, not on both nodes")
if len({j["handle"].split("_")[0] for j in jobs1}) != 1:
    failures.append("run 1's jobs were not one array")
for j in jobs1:
    name = os.path.basename(j["candidate"])
    if j.get("node") == "n1" and not (j["outcome"] == "decided" and keys.get(j.get("signer")) == "n1"):
        failures.append(f"{name} ran on n1 (enrolled) but is {j['outcome']} signed by {j.get('signer')!r}")
    if j.get("node") == "n2" and not (j["outcome"] == "rejected" and "not authentic" in j["detail"]):
        failures.append(f"{name} ran on n2 (not enrolled) but is {j['outcome']}: {j['detail'][:200]}")
if rc1 != 1:
    failures.append(f"run 1 exited {rc1}, expected 1 (n2's jobs without an accepted decision)")
for j in s2["jobs"]:
    if j["outcome"] != "decided" or j["decision"] != "KEEP_BASELINE" or j.get("signer") not in keys:
        failures.append(f"run 2: {os.path.basename(j['candidate'])} is {j['outcome']} {j['decision']} signed by "
                        f"{j.get('signer')!r}")
if rc2 != 0:
    failures.append(f"run 2 exited {rc2}, expected 0")
if "| n1 |" not in report or "| n2 |" not in report or "## Trusted keys" not in report:
    failures.append("the report does not name both nodes' keys")
for f in failures:
    print("FAIL", f)
print("tests/slurm/two_nodes.sh:", "FAILED" if failures else "PASSED")
sys.exit(1 if failures else 0)
EOF
