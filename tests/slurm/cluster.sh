#!/usr/bin/env bash
# cluster.sh - start/stop a private single-node Slurm cluster for tests.
#
# Usage:
#   tests/slurm/cluster.sh start  DIR   # install (if needed), configure, start, smoke-test
#   tests/slurm/cluster.sh stop   DIR   # cancel jobs, stop slurmd, slurmctld, munged (idempotent)
#   tests/slurm/cluster.sh status DIR   # daemons + sinfo + squeue
#   tests/slurm/cluster.sh env    DIR   # print the export line(s) a caller needs
#   tests/slurm/cluster.sh install DIR  # only install the packages (tests/slurm/two_nodes.sh)
#
# `start` prints progress on stderr and, on success, exactly these lines on
# stdout, so a caller can do:   eval "$(tests/slurm/cluster.sh start DIR)"
#   export SLURM_CONF=DIR/slurm.conf
#
# Everything (slurm.conf, munge key/socket, state, spool, logs, pid files)
# lives under DIR; nothing under /etc is written. Made for Debian 12 (Slurm
# 22.05, munge 0.5.15), run as root, with or without systemd/cgroups:
# ProctrackType=proctrack/linuxproc + TaskPlugin=task/none need no cgroups and
# no cgroup.conf (measured: slurmd 22.05 starts and runs jobs without one).
#
# munged runs with its own key and socket in DIR/munge, so a system munged
# (with /etc/munge/munge.key and /run/munge) may run alongside; slurm finds
# ours through AuthInfo=socket=... . Ports: 6817/6818 unless busy, then the
# next free pair of (16817,16818), (26817,26818), ... ; or set
# KWB_SLURM_CTLD_PORT / KWB_SLURM_SLURMD_PORT.
#
# Jobs finished more than MinJobAge (set to 3600 s here) ago vanish from
# `scontrol show job`; there is no accounting (sacct does not work), but every
# finished job gets one line in DIR/log/jobcomp.log (jobcomp/filetxt) with
# its JobState (COMPLETED, FAILED, TIMEOUT, CANCELLED, ...).
#
# Time limits: a job with --time=1 (minutes; the minimum, seconds round up)
# is killed with JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15.
# slurmctld checks limits on a fixed 30 s timer (no slurm.conf parameter
# for it), so the kill comes 0-30 s after the limit: measured 60.2, 62, 65,
# 75 and 85 s of RunTime for --time=1 (see NOTES.md). KillWait (SIGTERM ->
# SIGKILL grace) is set to 5 s (default 30): a job that ignores SIGTERM
# died 4.7 s after it.
# OverTimeLimit stays 0 (it can only lengthen the limit).
#
# Exit codes: 0 ok; 2 usage; 77 cannot run here (not root, no apt-get,
# packages not installable, daemons refuse to start for environmental
# reasons: permissions, ports, ...); 1 real failure (e.g. the cluster came up
# but the smoke-test job failed). Every wait is bounded.

set -u -o pipefail
export PATH=$PATH:/usr/sbin:/sbin   # munged, slurmd, slurmctld live there

PROG=${0##*/}
EXIT_SKIP=77
READY_TIMEOUT=${KWB_SLURM_READY_TIMEOUT:-30}   # seconds for daemons + node idle
SMOKE_TIMEOUT=${KWB_SLURM_SMOKE_TIMEOUT:-60}   # seconds for the smoke-test job
STOP_TIMEOUT=10                                # seconds per daemon on stop

STARTING=0  # set while `start` runs: a failure then stops what it started

log()  { printf '%s [%ss]: %s\n' "$PROG" "$SECONDS" "$*" >&2; }
cleanup_on_fail() {
    if ((STARTING)); then
        STARTING=0
        log "stopping what this start brought up"
        stop_all quiet
    fi
}
die()  { local rc=$1; shift; log "ERROR: $*"; cleanup_on_fail; exit "$rc"; }
skip() { log "CANNOT RUN HERE: $*"; cleanup_on_fail; exit "$EXIT_SKIP"; }

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------- paths ----
set_paths() {
    local d=$1
    case $d in
        *[[:space:]]*) die 2 "DIR must not contain whitespace (slurm.conf cannot quote it): '$d'";;
    esac
    if [[ $cmd == start ]]; then
        mkdir -p -- "$d" || die "$EXIT_SKIP" "cannot create $d"
    elif [[ ! -d $d ]]; then
        log "no cluster directory $d"
        [[ $cmd == stop ]] && exit 0
        [[ $cmd == status ]] && exit 3
    fi
    DIR=$(cd -- "$d" 2>/dev/null && pwd -P) || DIR=$(realpath -m -- "$d")
    CONF=$DIR/slurm.conf
    MDIR=$DIR/munge
    MSOCK=$MDIR/munge.socket
    MKEY=$MDIR/munge.key
    MPID=$MDIR/munged.pid
    MLOG=$MDIR/munged.log
    MSEED=$MDIR/munged.seed
    RUN=$DIR/run
    LOGD=$DIR/log
    STATE=$DIR/state
    SPOOL=$DIR/spool
    CTLD_PID=$RUN/slurmctld.pid
    SLURMD_PID=$RUN/slurmd.pid
    CTLD_LOG=$LOGD/slurmctld.log
    SLURMD_LOG=$LOGD/slurmd.log
}

# ------------------------------------------------------------- helpers ----
# pid_of NAME PIDFILE: print the pid if the file names a live process whose
# command name starts with NAME (guards against pid reuse).
pid_of() {
    local name=$1 file=$2 pid comm
    [[ -r $file ]] || return 1
    read -r pid <"$file" 2>/dev/null || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $comm == "$name"* ]] || return 1
    printf '%s\n' "$pid"
}

# stop_pid NAME PIDFILE: TERM, wait, KILL. Idempotent.
stop_pid() {
    local name=$1 file=$2 pid i
    if pid=$(pid_of "$name" "$file"); then
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "$name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null
            sleep 0.2
        fi
        log "stopped $name (pid $pid)"
    fi
    rm -f -- "$file"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

show_tail() {  # show_tail FILE...
    local f
    for f in "$@"; do
        [[ -s $f ]] || continue
        log "---- last lines of $f ----"
        tail -n 25 -- "$f" >&2
    done
}

# Classify a daemon start failure: environmental (77) or not (1).
start_failed() {  # start_failed WHAT LOGFILE...
    local what=$1; shift
    show_tail "$@"
    # grep -q exits 0 on a match even if some of the files are missing.
    if grep -Eqis -- \
        'operation not permitted|permission denied|address already in use|cannot assign requested address|not supported|read-only file system|no space left|cgroup|capabilit' "$@"; then
        skip "$what could not start in this environment (see log above)"
    fi
    die 1 "$what failed to start (see log above)"
}

# ------------------------------------------------------------- install ----
need_cmds=(munged mungekey munge slurmctld slurmd sbatch sinfo squeue scontrol scancel)

install_packages() {
    local missing=() c
    for c in "${need_cmds[@]}"; do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null 2>&1 || skip "apt-get not available and Slurm/munge not installed"
    ((EUID == 0)) || skip "must be root to install packages"
    # One install at a time: CTest runs the one-node and the two-node tests side by side, and both may find Slurm
    # missing on a fresh machine (apt-get would refuse the second while the first holds dpkg's lock).
    exec 9>/var/lock/kwb-slurm-install.lock
    flock 9
    missing=()
    for c in "${need_cmds[@]}"; do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    if ((${#missing[@]} == 0)); then
        exec 9>&-
        return 0
    fi
    log "missing commands: ${missing[*]}; installing Debian packages"
    # Keep the packages' postinst from starting the system daemons (we run
    # our own). Only if no policy-rc.d exists (Docker images ship one).
    local made_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
    fi
    local pkgs=(slurmctld slurmd slurm-client munge) rc
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2
    rc=$?
    if ((rc != 0)); then
        log "apt-get install failed; running apt-get update and retrying"
        timeout 300 apt-get update -q >&2 &&
            apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2
        rc=$?
    fi
    ((made_policy)) && rm -f /usr/sbin/policy-rc.d
    exec 9>&-  # the lock ends here: no daemon started later inherits it
    ((rc == 0)) || skip "could not install ${pkgs[*]}"
    for c in "${need_cmds[@]}"; do
        command -v "$c" >/dev/null 2>&1 || skip "'$c' still missing after install"
    done
}

# --------------------------------------------------------------- munge ----
start_munge() {
    mkdir -p "$MDIR" || die 1 "cannot create $MDIR"
    chmod 700 "$MDIR"
    if pid_of munged "$MPID" >/dev/null && munge -n -S "$MSOCK" 2>/dev/null | unmunge -S "$MSOCK" >/dev/null 2>&1; then
        log "munged already running (pid $(pid_of munged "$MPID"))"
        return 0
    fi
    stop_pid munged "$MPID"
    if [[ ! -s $MKEY ]]; then
        # Own key always: a private cluster must not depend on /etc/munge.
        mungekey -c -k "$MKEY" 2>>"$MLOG" ||
            dd if=/dev/urandom of="$MKEY" bs=1024 count=1 status=none ||
            die 1 "cannot create munge key $MKEY"
    fi
    chmod 400 "$MKEY"
    rm -f "$MSOCK" "$MSOCK.lock"
    # --force: tolerate a DIR below a group-writable (non-sticky) ancestor,
    # which munged's path checks would otherwise reject.
    munged --force --socket="$MSOCK" --key-file="$MKEY" --pid-file="$MPID" \
        --log-file="$MLOG" --seed-file="$MSEED" 2>>"$MLOG"
    local rc=$? i
    ((rc == 0)) || start_failed munged "$MLOG"
    for ((i = 0; i < 50; i++)); do
        if munge -n -S "$MSOCK" 2>/dev/null | unmunge -S "$MSOCK" >/dev/null 2>&1; then
            log "munged running (pid $(pid_of munged "$MPID" || echo '?'), socket $MSOCK)"
            return 0
        fi
        sleep 0.1
    done
    start_failed "munged (no credential round trip within 5 s)" "$MLOG"
}

# -------------------------------------------------------------- config ----
pick_ports() {
    if [[ -n ${KWB_SLURM_CTLD_PORT:-} || -n ${KWB_SLURM_SLURMD_PORT:-} ]]; then
        CTLD_PORT=${KWB_SLURM_CTLD_PORT:-6817}
        SLURMD_PORT=${KWB_SLURM_SLURMD_PORT:-6818}
        if port_busy "$CTLD_PORT" || port_busy "$SLURMD_PORT"; then
            skip "port $CTLD_PORT or $SLURMD_PORT is already in use"
        fi
        return
    fi
    local base
    for base in 6817 16817 26817 36817 46817; do
        if ! port_busy "$base" && ! port_busy $((base + 1)); then
            CTLD_PORT=$base SLURMD_PORT=$((base + 1))
            return
        fi
    done
    skip "no free port pair for slurmctld/slurmd"
}

write_config() {
    local host nodeline
    host=$(uname -n)
    host=${host%%.*}            # = hostname -s; slurmd -N uses it as NodeName
    [[ -n $host ]] || host=localhost
    NODE=$host
    # "NodeName=vm CPUs=2 Boards=1 ... RealMemory=24105" (+ a second UpTime line)
    nodeline=$(slurmd -C 2>/dev/null | grep -m1 '^NodeName=') ||
        skip "'slurmd -C' cannot read this machine's hardware"
    nodeline=${nodeline#NodeName=* }
    mkdir -p "$RUN" "$LOGD" "$STATE" "$SPOOL/slurmd" || die 1 "cannot create dirs in $DIR"
    chmod 755 "$SPOOL" "$LOGD"
    cat >"$CONF.tmp" <<EOF
# Generated by tests/slurm/cluster.sh - private single-node cluster.
ClusterName=kwbtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MSOCK
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGD/jobcomp.log
SchedulerType=sched/backfill
# Default batch_sched_delay=3 makes a batch job submitted to an idle node
# wait for the next ~3 s scheduler pass (measured: trivial job 3.0 s from
# submit to COMPLETED); with 0 it takes 0.7-1.1 s.
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Reject impossible requests (-c 4 on a 2-CPU node) at submit time; with
# the default (NO) such a job is accepted and pends forever (PartitionConfig).
EnforcePartLimits=ALL
MinJobAge=3600
KillWait=5
OverTimeLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$host NodeAddr=127.0.0.1 $nodeline State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    mv -f "$CONF.tmp" "$CONF"
    printf '%s\n' "$NODE" >"$DIR/nodename"
}

# ------------------------------------------------------------- daemons ----
# Wait (bounded) until NAME's pid file names a live process; fail if the
# launcher already exited non-zero and nothing is alive.
wait_daemon() {  # wait_daemon NAME PIDFILE LOG...
    local name=$1 file=$2 i; shift 2
    for ((i = 0; i < READY_TIMEOUT * 10; i++)); do
        pid_of "$name" "$file" >/dev/null && return 0
        sleep 0.1
    done
    start_failed "$name" "$@"
}

# job_field ID FIELD: one field of `scontrol show job -o ID` (e.g. JobState).
job_field() {
    timeout 5 scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}

start_slurm() {
    local t0=$SECONDS launched state started i
    launched=$(date +%s)
    if pid_of slurmctld "$CTLD_PID" >/dev/null; then
        log "slurmctld already running"
    else
        # Daemon mode: forks once configured; early errors go to .stderr.
        slurmctld -f "$CONF" >"$LOGD/slurmctld.stderr" 2>&1 </dev/null ||
            start_failed slurmctld "$LOGD/slurmctld.stderr" "$CTLD_LOG"
        wait_daemon slurmctld "$CTLD_PID" "$LOGD/slurmctld.stderr" "$CTLD_LOG"
    fi
    if pid_of slurmd "$SLURMD_PID" >/dev/null; then
        log "slurmd already running"
        launched=0
    else
        slurmd -f "$CONF" -N "$NODE" >"$LOGD/slurmd.stderr" 2>&1 </dev/null ||
            start_failed slurmd "$LOGD/slurmd.stderr" "$SLURMD_LOG"
        wait_daemon slurmd "$SLURMD_PID" "$LOGD/slurmd.stderr" "$SLURMD_LOG"
    fi
    # Bounded wait until slurmctld has heard from *this* slurmd (its
    # SlurmdStartTime is not older than our launch; a restarted slurmctld
    # reports the node IDLE from saved state before slurmd registers) and the
    # node is usable.
    for ((i = 0; i < READY_TIMEOUT * 2; i++)); do
        state=$(timeout 5 sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n1)
        started=$(timeout 5 scontrol show node -o "$NODE" 2>/dev/null |
            grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)
        started=$(date -d "$started" +%s 2>/dev/null || echo 0)
        case $state in
            idle | mixed | allocated | completing)
                if ((started >= launched - 1)); then
                    log "node $NODE is $state after $((SECONDS - t0)) s"
                    return 0
                fi;;
            *drain* | *down* | *fail*)
                if ((started >= launched - 1)); then
                    log "node $NODE is $state:"
                    timeout 5 scontrol show node "$NODE" >&2
                    start_failed "slurmd (node $state)" "$SLURMD_LOG" "$CTLD_LOG"
                fi;;
        esac
        pid_of slurmctld "$CTLD_PID" >/dev/null || start_failed "slurmctld (died)" "$LOGD/slurmctld.stderr" "$CTLD_LOG"
        pid_of slurmd "$SLURMD_PID" >/dev/null || start_failed "slurmd (died)" "$LOGD/slurmd.stderr" "$SLURMD_LOG"
        sleep 0.5
    done
    log "node $NODE not ready after ${READY_TIMEOUT}s (state '${state:-?}')"
    start_failed "slurm (node never became idle)" "$SLURMD_LOG" "$CTLD_LOG"
}

# Submit `uname -n` (= hostname), poll (0.5 s) until the job leaves PENDING/RUNNING, check
# JobState=COMPLETED and the output. (Not `sbatch --wait`: it polls at 2 s then
# 8 s... intervals, measured ~7 s of dead time per job here.)
smoke_test() {
    local out=$DIR/smoke jobid state want i
    mkdir -p "$out"
    want=$(uname -n)
    jobid=$(cd "$out" && timeout 10 sbatch --parsable --job-name=kwb-smoke --time=1 \
        --output="$out/%j.out" --wrap 'uname -n')
    jobid=${jobid%%;*}
    [[ $jobid =~ ^[0-9]+$ ]] || {
        show_tail "$CTLD_LOG"
        die 1 "smoke test: sbatch failed (got '$jobid')"
    }
    for ((i = 0; i < SMOKE_TIMEOUT * 2; i++)); do
        state=$(job_field "$jobid" JobState)
        case $state in
            PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 0.5;;
            *) break;;
        esac
    done
    if [[ $state != COMPLETED ]] || ! grep -qxF -- "$want" "$out/$jobid.out" 2>/dev/null; then
        timeout 5 scontrol show job "$jobid" >&2
        show_tail "$SLURMD_LOG" "$CTLD_LOG"
        timeout 5 scancel "$jobid" 2>/dev/null
        die 1 "smoke job $jobid: JobState=${state:-?} after <=${SMOKE_TIMEOUT}s, output '$(cat "$out/$jobid.out" 2>/dev/null)' (expected '$want')"
    fi
    log "smoke test ok: job $jobid JobState=$state, printed '$want'"
}

# ---------------------------------------------------------------- stop ----
# slurmstepd processes started by our slurmd (they inherit our SLURM_CONF)
# plus all their descendants (the job's processes). They outlive slurmd and
# are left over when jobs could not be cancelled (e.g. slurmctld died).
# Plain /proc parsing: procps (ps/pgrep) may be absent in slim containers.
our_leftovers() {
    local p pid ppid rest comm
    local -A parent=()
    local -a found=()
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        { read -r rest <"$p/stat"; } 2>/dev/null || continue
        rest=${rest##*) }                 # drop "pid (comm) ", comm may hold spaces
        ppid=${rest#* }; ppid=${ppid%% *}
        parent[$pid]=$ppid
        comm=$(cat "$p/comm" 2>/dev/null) || continue
        if [[ $comm == slurmstepd ]] && grep -qzxF "SLURM_CONF=$CONF" "$p/environ" 2>/dev/null; then
            found+=("$pid")
        fi
    done
    ((${#found[@]})) || return 0
    local changed=1 q f
    local -A mine=()
    for f in "${found[@]}"; do mine[$f]=1; done
    while ((changed)); do                 # transitive closure over ppid
        changed=0
        for q in "${!parent[@]}"; do
            if [[ -z ${mine[$q]:-} && -n ${mine[${parent[$q]}]:-} ]]; then
                mine[$q]=1; changed=1
            fi
        done
    done
    printf '%s\n' "${!mine[@]}"
}

stop_all() {
    local quiet=${1:-} i jobs pids
    if pid_of slurmctld "$CTLD_PID" >/dev/null; then
        jobs=$(timeout 5 squeue -h -o %A 2>/dev/null | tr '\n' ' ')
        if [[ -n ${jobs// /} ]]; then
            log "cancelling jobs: $jobs"
            # shellcheck disable=SC2086
            timeout 10 scancel $jobs 2>/dev/null
            for ((i = 0; i < 20; i++)); do
                [[ -z $(timeout 5 squeue -h -o %A 2>/dev/null) ]] && break
                sleep 0.5
            done
        fi
    fi
    stop_pid slurmd "$SLURMD_PID"
    stop_pid slurmctld "$CTLD_PID"
    pids=$(our_leftovers)
    if [[ -n $pids ]]; then
        log "killing leftover job processes: ${pids//$'\n'/ }"
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null; sleep 1
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null
    fi
    stop_pid munged "$MPID"
    rm -f "$MSOCK" "$MSOCK.lock"
    [[ -n $quiet ]] || log "cluster in $DIR stopped"
}

# ---------------------------------------------------------------- main ----
cmd=${1:-}; [[ $# -eq 2 ]] || usage
set_paths "$2"
export SLURM_CONF=$CONF

case $cmd in
    start)
        ((EUID == 0)) || skip "must run as root (slurmd launches jobs as their user)"
        t_start=$SECONDS
        install_packages
        if pid_of slurmctld "$CTLD_PID" >/dev/null && pid_of slurmd "$SLURMD_PID" >/dev/null &&
            pid_of munged "$MPID" >/dev/null; then
            log "cluster in $DIR already running"
            NODE=$(cat "$DIR/nodename")
        else
            stop_all quiet         # clean up a half-started cluster
            STARTING=1
            pick_ports
            start_munge
            write_config
            log "slurm.conf written: $CONF (ports $CTLD_PORT/$SLURMD_PORT, node $NODE)"
        fi
        STARTING=1
        start_slurm
        smoke_test
        STARTING=0
        log "cluster up in $((SECONDS - t_start)) s ($(sinfo -V))"
        printf 'export SLURM_CONF=%s\n' "$CONF"
        ;;
    stop)
        stop_all
        ;;
    status)
        rc=0
        for d in "munged:$MPID" "slurmctld:$CTLD_PID" "slurmd:$SLURMD_PID"; do
            if p=$(pid_of "${d%%:*}" "${d#*:}"); then
                echo "${d%%:*}: running (pid $p)"
            else
                echo "${d%%:*}: not running"; rc=3
            fi
        done
        if pid_of slurmctld "$CTLD_PID" >/dev/null; then
            timeout 5 sinfo || rc=3
            timeout 5 squeue
        fi
        exit "$rc"
        ;;
    env)
        printf 'export SLURM_CONF=%s\n' "$CONF"
        ;;
    install)
        ((EUID == 0)) || skip "must run as root to install Slurm and munge"
        install_packages
        ;;
    *) usage;;
esac
