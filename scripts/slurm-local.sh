#!/usr/bin/env bash
# scripts/slurm-local.sh - a real Slurm cluster on this one host, for dse's tests and CI.
#
#   scripts/slurm-local.sh start    install (if needed), configure, start, wait until ready
#   scripts/slurm-local.sh stop     cancel jobs, stop every daemon this script starts
#   scripts/slurm-local.sh status   say which daemons run, print sinfo
#
# What `start` gives you (Debian 12 "bookworm" packages, Slurm 22.05; no systemd needed):
#   - munged, MariaDB + slurmdbd (so `sacct` works), slurmctld on 127.0.0.1;
#   - nodes n1..n3, one `slurmd -N nX` each, listening on 127.0.0.1:17001..17003;
#   - cgroup v1 process tracking and memory limits: a job over its --mem ends OUT_OF_MEMORY,
#     and scancel kills every process of a job, even detached ones;
#   - partitions `batch` (default, PriorityTier=1) and `urgent` (PriorityTier=10); an urgent
#     job that needs a batch job's resources preempts it with PreemptMode=REQUEUE
#     (the batch job shows PREEMPTED in `sacct -D` and runs again 10-14 s later);
#   - a partition `aside` of its own node(s) after those (n4 by default), which nothing in
#     `batch`/`urgent` touches: a test that must wait out Slurm's clock (a 1-minute time
#     limit) runs there beside tests that take `batch` nodes down or preempt them;
#   - a partition `wide` of the batch nodes and a spare node after the aside ones (n5 by
#     default) that no other partition has: a job of all the batch nodes' count can still run
#     there once a test took one of them down (its retry avoids that node).
# The client commands (sbatch, squeue, sacct, ...) find the config at /etc/slurm/slurm.conf,
# so callers need no environment. Jobs run as root; submit with -N1 when you mean to preempt.
#
# `start` is idempotent: when everything already runs it only re-checks and runs the smoke
# job (under 1 s). When the generated config differs from the one on disk, it restarts only
# the Slurm daemons (munged and MariaDB keep running). Concurrent calls wait on a lock.
# Every daemon is started detached from the caller's stdin/stdout/stderr, so capturing this
# script's output (e.g. subprocess.run(capture_output=True)) does not hang.
#
# Progress goes to stderr; the "ready" summary and timings to stdout. Exit status of `start`
# (on failure the last line on stderr is "slurm-local: cannot start: <one-line reason>"):
#   0  cluster ready
#   1  a daemon did not come up or stay up, or the smoke job failed (daemon log tails printed)
#   2  this machine cannot host the cluster: not root, no apt-get, no apt access, no
#      writable cgroup v1 hierarchy, or an /etc/slurm/slurm.conf this script did not write.
#      A test setup can skip with that reason.
# `status` exits 0 when every daemon runs and 3 otherwise. `stop` exits 0.
#
# Settings (environment, all optional):
#   DSE_SLURM_NODES=3         nodes n1..nN of partitions batch and urgent (one slurmd each,
#                             ports 17001..)
#   DSE_SLURM_ASIDE=1         nodes after those, in partition `aside` only (0 = none)
#   DSE_SLURM_SPARE=1         nodes after the aside ones, in partition `wide` only, with the
#                             batch nodes (0 = none, and no `wide` partition)
#   DSE_SLURM_CPUS=2          CPUs per node; may exceed the real CPU count
#   DSE_SLURM_MEM_MB=auto     RealMemory per node; auto = 80% of RAM / nodes.
#                             DefMemPerCPU = RealMemory / CPUs (a job without --mem gets that)
#   DSE_SLURM_CGROUP=1        1 = cgroup v1 (required; exit 2 without it);
#                             0 = no cgroups: memory is enforced by polling RSS, and an
#                             over-limit job ends FAILED 0:9 instead of OUT_OF_MEMORY
#   DSE_SLURM_MIN_JOB_AGE=3600  seconds a finished job stays visible to squeue/scontrol
#   DSE_SLURM_FRESH=0         1 = wipe saved job state and the accounting DB (job ids restart at 1)
#   DSE_SLURM_SMOKE=1         1 = run `srun -N<nodes> ...` once ready (skipped if jobs are queued)
#   DSE_SLURM_TIMEOUT=120     seconds `start` may take once packages are installed
#   DSE_SLURM_PURGE=0         (stop) 1 = also delete job state, spools, logs and the accounting DB
#
# Files: /etc/slurm/{slurm,cgroup,slurmdbd}.conf (generated, rewritten by every start),
# /var/log/slurm/ (daemon logs, jobcomp.log, apt.log), /var/spool/slurmctld, /var/spool/slurmd/nX,
# pid files in /run. Installed packages and /etc/slurm stay in place after `stop`.
#
# Settings and timings come from measurements on Debian 12, 2 cores, 24 GiB, root, PID 1 not
# systemd (see the project's Slurm notes). Why some non-default values are here:
#   AuthInfo=cred_expire=10       a requeued/preempted job may restart after ~10 s, not ~2 min
#   sched_interval=2              a requeued job past its BeginTime is scheduled within 2 s
#   ReturnToService=1             a node set DOWN by a test stays down until resumed
#   SlurmdParameters=config_overrides   three slurmd share one host; trust the node lines
#   KillWait=5, SlurmdTimeout=30  faster TIMEOUT / NODE_FAIL scenarios
set -Eeuo pipefail

NODES=${DSE_SLURM_NODES:-3}
ASIDE=${DSE_SLURM_ASIDE:-1}
SPARE=${DSE_SLURM_SPARE:-1}
CPUS=${DSE_SLURM_CPUS:-2}
MEM_MB=${DSE_SLURM_MEM_MB:-auto}
CGROUP=${DSE_SLURM_CGROUP:-1}
MIN_JOB_AGE=${DSE_SLURM_MIN_JOB_AGE:-3600}
FRESH=${DSE_SLURM_FRESH:-0}
SMOKE=${DSE_SLURM_SMOKE:-1}
TIMEOUT=${DSE_SLURM_TIMEOUT:-120}
PURGE=${DSE_SLURM_PURGE:-0}

CLUSTER=dse-local
NODE_PORT_BASE=17000                 # node nX listens on NODE_PORT_BASE + X
CONF_DIR=/etc/slurm
STATE_DIR=/var/spool/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm
DB_NAME=slurm_acct_db
DB_USER=slurm
DB_PASS=dse-slurm-local             # local-only account; MariaDB listens on 127.0.0.1/socket
MARKER="# Generated by dse scripts/slurm-local.sh"
LOCK=/run/dse-slurm-local.lock
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)

# ------------------------------------------------------------------ helpers
exec 3>&2                            # progress/errors; stays visible while checks are silenced
now_us() { echo "${EPOCHREALTIME//[!0-9]/}"; }   # microseconds, no fork
secs() { local us=$(( $(now_us) - $1 )); printf '%d.%d' $(( us / 1000000 )) $(( us % 1000000 / 100000 )); }
log() { printf '[slurm-local %(%T)T] %s\n' -1 "$*" >&3; }

# tail_logs FILE...: the last lines of each (non-empty) daemon log, to explain a failure
tail_logs() {
  local f
  for f in "$@"; do
    if [ -s "$f" ]; then printf '==> %s <==\n' "$f" >&3; tail -n 12 "$f" >&3; fi
  done
}
# Log sizes when this run began, so that a reason quotes only errors logged by this run.
declare -A LOG_SIZE=()
mark_logs() {
  local f
  for f in /var/log/munge/munged.log /var/log/mysql/mariadbd.log "$LOG_DIR"/*.log "$LOG_DIR/daemons.out"; do
    if [ -f "$f" ]; then LOG_SIZE[$f]=$(stat -c %s "$f"); fi
  done
}
# last_error LOG: the last error line this run added to LOG (without the known-harmless PMIx
# noise), or a note that there is none
last_error() {
  local from=$(( ${LOG_SIZE[$1]:-0} + 1 )) line
  [ "$(stat -c %s "$1" 2>/dev/null || echo 0)" -ge "${LOG_SIZE[$1]:-0}" ] || from=1   # truncated meanwhile
  line=$(tail -c "+$from" "$1" 2>/dev/null | grep -iE 'error|fatal' | grep -viE 'pmix|MPI: Cannot create context' |
         tail -n1 | sed -E 's/^\[[^]]*\] //; s/^(error|fatal): *//' || true)
  echo "${line:-no new error in $1}"
}
# fail CODE REASON [LOG...]: print the logs, then one line with the reason, and exit
fail() {
  local code=$1 reason=$2; shift 2
  tail_logs "$@"
  printf 'slurm-local: cannot start: %s\n' "$reason" >&3
  exit "$code"
}
trap 'rc=$?; printf "slurm-local: cannot %s: unexpected error (rc=%d) at line %d: %s\n" "${ACTION:-run}" "$rc" "$LINENO" "$BASH_COMMAND" >&3; exit 1' ERR

# alive PIDFILE COMM: the pid in PIDFILE is a live process named COMM. A killed daemon can stay
# a zombie for a few seconds (PID 1 here reaps slowly); that counts as dead.
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && running "$pid"
}
# running PID: the process exists and is not a zombie
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }                  # the fields after "pid (comm) ", the state first
  [ "${stat%% *}" != Z ]
}
pid_of() { cat "$1" 2>/dev/null || true; }

# The daemons: name | pid file | process name | log file
daemon_table() {
  local i
  echo "munged /run/munge/munged.pid munged /var/log/munge/munged.log"
  echo "mariadbd /run/mysqld/mysqld.pid mariadbd /var/log/mysql/mariadbd.log"
  echo "slurmdbd /run/slurmdbd.pid slurmdbd $LOG_DIR/slurmdbd.log"
  echo "slurmctld /run/slurmctld.pid slurmctld $LOG_DIR/slurmctld.log"
  for i in $(seq 1 "$(configured_nodes)"); do
    echo "slurmd-n$i /run/slurmd-n$i.pid slurmd $LOG_DIR/slurmd-n$i.log"
  done
}
# configured_nodes: node count of the config on disk (stop/status), else of the settings
configured_nodes() {
  local n
  n=$(sed -n 's/^# dse-slurm-local nodes=\([0-9]*\).*/\1/p' "$CONF_DIR/slurm.conf" 2>/dev/null || true)
  echo "${n:-$(( NODES + ASIDE + SPARE ))}"
}

# stop_pids COMM SECONDS PIDFILE...: SIGTERM each live one, wait up to SECONDS, then SIGKILL
stop_pids() {
  local comm=$1 secs=$2 f pid pids=() i left; shift 2
  for f in "$@"; do
    if alive "$f" "$comm"; then
      pid=$(cat "$f"); pids+=("$pid")
      log "stopping $comm (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  for (( i = 0; i < secs * 10; i++ )); do
    left=0
    for pid in "${pids[@]}"; do if running "$pid"; then left=1; fi; done
    [ "$left" = 1 ] || return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] && running "$pid"; then
      log "$comm (pid $pid) did not exit after ${secs}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}
# in_parallel "CMD ARGS" "CMD ARGS"...: run each (word-split) in the background, wait for all
in_parallel() {
  local c pids=()
  # shellcheck disable=SC2086
  for c in "$@"; do $c & pids+=($!); done
  wait "${pids[@]}"
}
stop_slurm_daemons() {   # slurmd's and slurmctld in parallel (each takes up to ~2 s to exit)
  in_parallel "stop_pids slurmd 10 $(echo /run/slurmd-n*.pid)" "stop_pids slurmctld 10 /run/slurmctld.pid"
}

# ------------------------------------------------------------------ start
# cgroup_v1_usable: /sys/fs/cgroup is a v1 (or hybrid) tmpfs with writable memory + freezer
cgroup_v1_usable() {
  local c d
  [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] || return 1
  [ -e /sys/fs/cgroup/memory/memory.limit_in_bytes ] || return 1
  for c in memory freezer; do
    d=/sys/fs/cgroup/$c/dse-slurm-probe.$$
    mkdir "$d" 2>/dev/null || return 1
    rmdir "$d" 2>/dev/null || return 1
  done
}

install_packages() {
  local missing=() p status aptlog=$LOG_DIR/apt.log why
  while read -r p status; do
    [ "$status" = installed ] || missing+=("$p")
  done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)
  for p in "${PACKAGES[@]}"; do   # dpkg-query prints nothing for packages it never saw
    dpkg-query -W "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  command -v apt-get >/dev/null || fail 2 "packages ${missing[*]} missing and there is no apt-get"

  log "installing ${missing[*]} (apt log: $aptlog)"
  # Package scripts must not start daemons with Debian's default configs: policy-rc.d exit 101
  # (Debian images usually have one; otherwise one is put in place for the install).
  # man-db's trigger would spend ~6 s re-indexing manual pages; with its auto-update flag moved
  # aside it does nothing (`man sbatch` still works; only apropos/whatis miss the new pages).
  # Both are put back on any exit.
  local undo=()
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    undo+=("rm -f /usr/sbin/policy-rc.d")
  fi
  if [ -e /var/lib/man-db/auto-update ]; then
    mv /var/lib/man-db/auto-update /var/lib/man-db/auto-update.dse-slurm-local
    undo+=("mv /var/lib/man-db/auto-update.dse-slurm-local /var/lib/man-db/auto-update")
  fi
  INSTALL_UNDO=":"; for p in "${undo[@]}"; do INSTALL_UNDO+="; $p"; done
  trap 'eval "$INSTALL_UNDO"' EXIT; trap 'exit 130' INT TERM

  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -q -y -o DPkg::Lock::Timeout=120
             -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  : > "$aptlog"
  # One `apt-get update` (the lists may be absent or stale), then the install. A failed update
  # is not fatal by itself (a broken third-party source need not matter); a failed install is.
  "${apt[@]}" update >>"$aptlog" 2>&1 || true
  if ! "${apt[@]}" install --no-install-recommends "${missing[@]}" >>"$aptlog" 2>&1; then
    why=$( { grep -m1 '^W: Failed to fetch' "$aptlog"; grep -m1 '^E:' "$aptlog"; } | tr -s ' \n' ' ' || true)
    fail 2 "apt-get install ${missing[*]} failed (no apt access?): ${why% }" "$aptlog"
  fi
  eval "$INSTALL_UNDO"; INSTALL_UNDO=":"; trap - EXIT INT TERM
}

# node_range FIRST LAST: Slurm's name for nodes nFIRST..nLAST
node_range() { if [ "$1" = "$2" ]; then echo "n$1"; else echo "n[$1-$2]"; fi; }

generate_configs() {
  local mem_kb mem_mb=$MEM_MB nodelist ports track cgroup_conf total=$(( NODES + ASIDE + SPARE ))
  local aside_nodes="" aside_partition="" spare_nodes
  if [ "$mem_mb" = auto ]; then
    mem_kb=$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)
    mem_mb=$(( mem_kb / 1024 * 8 / 10 / total ))
  fi
  if [ "$total" = 1 ]; then nodelist=n1; ports=$(( NODE_PORT_BASE + 1 ))
  else nodelist="n[1-$total]"; ports="[$(( NODE_PORT_BASE + 1 ))-$(( NODE_PORT_BASE + total ))]"; fi
  NODELIST=$(node_range 1 "$NODES")
  if [ "$ASIDE" -gt 0 ]; then
    aside_nodes=$(node_range $(( NODES + 1 )) $(( NODES + ASIDE )))
    aside_partition="
PartitionName=aside Nodes=$aside_nodes MaxTime=INFINITE State=UP PriorityTier=1"
    NODELIST+=" aside=$aside_nodes"
  fi
  if [ "$SPARE" -gt 0 ]; then
    spare_nodes=$(node_range $(( NODES + ASIDE + 1 )) "$total")
    aside_partition+="
PartitionName=wide Nodes=$(node_range 1 "$NODES"),$spare_nodes MaxTime=INFINITE State=UP PriorityTier=1"
    NODELIST+=" wide=$(node_range 1 "$NODES"),$spare_nodes"
  fi

  if [ "$CGROUP" = 1 ]; then
    track="# cgroup v1: processes tracked in per-node hierarchies (slurm_nX), memory limit by the kernel
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1"
    cgroup_conf="$MARKER
CgroupPlugin=cgroup/v1
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no"
  else
    track="# no cgroups: tracking by /proc parentage; memory limit by polling RSS every second
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill"
    cgroup_conf=""
  fi

  NEW_SLURM_CONF="$MARKER - rewritten by every start; do not edit
# dse-slurm-local nodes=$total cpus=$CPUS mem=$mem_mb cgroup=$CGROUP
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
# credential lifetime; also the delay before a requeued job may start again (default 120)
AuthInfo=cred_expire=10
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR/%n
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
$track
# several slurmd on one host: trust the node line below instead of the hardware
SlurmdParameters=config_overrides
ReturnToService=1
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$(( mem_mb / CPUS ))
MinJobAge=$MIN_JOB_AGE
KillWait=5
InactiveLimit=0
SlurmdTimeout=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStoreFlags=job_comment
# one permanent line per finished run (state, exit code), independent of the database
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
# a job in a higher-PriorityTier partition requeues the lower-tier jobs it needs room from
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=$nodelist NodeHostname=localhost NodeAddr=127.0.0.1 Port=$ports CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$mem_mb State=UNKNOWN
PartitionName=batch Nodes=$(node_range 1 "$NODES") Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=$(node_range 1 "$NODES") MaxTime=INFINITE State=UP PriorityTier=10$aside_partition"
  NEW_CGROUP_CONF=$cgroup_conf
  NEW_DBD_CONF="$MARKER - rewritten by every start; do not edit
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$LOG_DIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME"
}

# ours FILE: absent, or written by this script (or by the reference script in the Slurm notes)
ours() { [ ! -e "$1" ] || head -n1 "$1" | grep -qE '^# Generated by .*slurm-local'; }
same() { [ "$(cat "$1" 2>/dev/null)" = "$2" ]; }

write_configs() {
  local f
  for f in slurm.conf cgroup.conf slurmdbd.conf; do
    ours "$CONF_DIR/$f" ||
      fail 2 "$CONF_DIR/$f exists and was not written by this script; move it away to use the local cluster"
  done
  mkdir -p "$CONF_DIR" "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR"
  if ! same "$CONF_DIR/slurm.conf" "$NEW_SLURM_CONF" ||
     { [ -n "$NEW_CGROUP_CONF" ] && ! same "$CONF_DIR/cgroup.conf" "$NEW_CGROUP_CONF"; }; then
    if [ -e "$CONF_DIR/slurm.conf" ]; then log "config changed: restarting the Slurm daemons"; fi
    stop_slurm_daemons
    printf '%s\n' "$NEW_SLURM_CONF" > "$CONF_DIR/slurm.conf"
    if [ -n "$NEW_CGROUP_CONF" ]; then printf '%s\n' "$NEW_CGROUP_CONF" > "$CONF_DIR/cgroup.conf"
    else rm -f "$CONF_DIR/cgroup.conf"; fi
    log "wrote $CONF_DIR/slurm.conf: $(sed -n 's/^# dse-slurm-local //p' "$CONF_DIR/slurm.conf")"
  fi
  if ! same "$CONF_DIR/slurmdbd.conf" "$NEW_DBD_CONF"; then
    stop_pids slurmdbd 10 /run/slurmdbd.pid
    ( umask 077; printf '%s\n' "$NEW_DBD_CONF" > "$CONF_DIR/slurmdbd.conf" )
  fi
  chmod 600 "$CONF_DIR/slurmdbd.conf"   # slurmdbd refuses a config others can read
  if [ "$FRESH" = 1 ]; then
    log "fresh start: wiping saved job state (job ids restart at 1)"
    stop_slurm_daemons
    stop_pids slurmdbd 10 /run/slurmdbd.pid
    rm -rf "${STATE_DIR:?}"/* "${SPOOL_DIR:?}"/*
    rm -f "$LOG_DIR/jobcomp.log"
  fi
}

# --- daemon start commands. Each gets no fd of ours: stdin from /dev/null, output to its
# own file, and neither the lock (fd 9) nor the log channel (fd 3).
detached() { "$@" </dev/null >>"$LOG_DIR/daemons.out" 2>&1 3>&- 9>&-; }
start_munged() {
  [ -s /etc/munge/munge.key ] || runuser -u munge -- /usr/sbin/mungekey --create
  install -d -o munge -g munge -m 0755 /run/munge
  detached runuser -u munge -- /usr/sbin/munged
}
start_mariadbd() {
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  install -d -o mysql -g adm -m 2750 /var/log/mysql     # systemd would normally create these
  setsid -f /usr/sbin/mariadbd --user=mysql --innodb-lock-wait-timeout=900 </dev/null >>/var/log/mysql/mariadbd.log 2>&1 3>&- 9>&-
}
start_slurmdbd()  { detached /usr/sbin/slurmdbd; }
start_slurmctld() { detached /usr/sbin/slurmctld; }
start_slurmd()    { mkdir -p "$SPOOL_DIR/$1"; detached /usr/sbin/slurmd -N "$1"; }

# ensure NAME PIDFILE COMM LOG START...: true if the daemon runs. Otherwise start it (again at
# most every 3 s, so one that died is retried) and return false; after 3 starts that did not
# stay up, fail at once with its log rather than waiting for the deadline.
declare -A TRIED=() TRIED_AT=()
ensure() {
  local name=$1 pidfile=$2 comm=$3 logf=$4 t; shift 4
  alive "$pidfile" "$comm" && return 0
  t=$(now_us)
  if (( t - ${TRIED_AT[$name]:-0} >= 3000000 )); then
    if (( ${TRIED[$name]:-0} >= 3 )); then
      fail 1 "$name does not stay up (started 3 times): $(last_error "$logf") (see $logf)" \
        "$logf" "$LOG_DIR/daemons.out"
    fi
    TRIED[$name]=$(( ${TRIED[$name]:-0} + 1 )); TRIED_AT[$name]=$t
    log "starting $name"
    "$@" || log "$name: start command failed (rc=$?)"
  fi
  return 1
}

# wait_for WHAT "LOG..." CHECK...: run CHECK every 0.2 s until it succeeds; at the deadline fail
# naming WHAT, with the tails of LOG...
wait_for() {
  local what=$1 logs=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    # shellcheck disable=SC2086  # logs is a space-separated list of paths
    (( $(now_us) < DEADLINE )) ||
      fail 1 "timed out after ${TIMEOUT}s waiting for $what: $(last_error "${logs%% *}")" $logs
    sleep 0.2
  done
}

munge_ok()     { ensure munged /run/munge/munged.pid munged /var/log/munge/munged.log start_munged &&
                 munge -n | unmunge; }
mariadb_ok()   { ensure mariadbd /run/mysqld/mysqld.pid mariadbd /var/log/mysql/mariadbd.log start_mariadbd &&
                 mysqladmin --connect-timeout=1 status; }
slurmdbd_ok()  { ensure slurmdbd /run/slurmdbd.pid slurmdbd "$LOG_DIR/slurmdbd.log" start_slurmdbd &&
                 timeout 10 sacctmgr -n -P list cluster; }
slurmctld_ok() { ensure slurmctld /run/slurmctld.pid slurmctld "$LOG_DIR/slurmctld.log" start_slurmctld &&
                 timeout 10 scontrol ping | grep -q "is UP"; }
# nodes_ok: every slurmd runs and every node is usable (idle, or busy with jobs). Nodes left
# DOWN/DRAIN (by a test, or a slurmd that was killed) are resumed.
NOT_READY=""
nodes_ok() {
  local i name state
  NOT_READY=""
  for (( i = 1; i <= NODES + ASIDE + SPARE; i++ )); do
    ensure "slurmd n$i" "/run/slurmd-n$i.pid" slurmd "$LOG_DIR/slurmd-n$i.log" start_slurmd "n$i" ||
      NOT_READY+=" n$i"
  done
  [ -z "$NOT_READY" ] || return 1
  while read -r name state; do
    case "$state" in
      idle|mixed|allocated|completing) ;;
      down|drained|draining|drain|fail|failing)
        scontrol update nodename="$name" state=resume || true; NOT_READY+=" $name" ;;
      *) NOT_READY+=" $name($state)" ;;   # unknown, *-suffixed (not responding), ...
    esac
  done < <(timeout 10 sinfo -h -N -o "%N %T" | sort -u)
  [ -z "$NOT_READY" ]
}
node_logs() {
  local n out="$LOG_DIR/slurmctld.log"
  for n in ${NOT_READY:-$(seq -f 'n%g' 1 $(( NODES + ASIDE + SPARE )))}; do out+=" $LOG_DIR/slurmd-${n%%(*}.log"; done
  echo "$out"
}

setup_database() {
  if [ ! -d /var/lib/mysql/mysql ]; then
    log "initialising the MariaDB data directory"
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$LOG_DIR/apt.log" 2>&1 ||
      fail 1 "mariadb-install-db failed" "$LOG_DIR/apt.log"
  fi
  wait_for "MariaDB (mariadbd)" "/var/log/mysql/mariadbd.log $LOG_DIR/daemons.out" mariadb_ok
  if [ "$FRESH" = 1 ]; then mysql -e "DROP DATABASE IF EXISTS $DB_NAME"; fi
  mysql -e "CREATE DATABASE IF NOT EXISTS $DB_NAME;
            CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
            ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
            GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';"
}

# smoke: one step on every node; each prints its Slurm node name
smoke() {
  local queued out want
  queued=$(squeue -h -o %i | wc -l)
  if [ "$queued" -gt 0 ]; then SMOKE_NOTE="skipped ($queued jobs queued)"; return 0; fi
  want=$(seq -f 'n%g' 1 "$NODES" | tr '\n' ' ')
  out=$(timeout 60 srun -N "$NODES" --ntasks-per-node=1 -t 1 -J dse-smoke -D /tmp \
        bash -c 'echo $SLURMD_NODENAME' 2>&1 3>&- 9>&-) ||
    fail 1 "smoke job (srun -N$NODES) failed: $(echo "$out" | tail -n1)" "$LOG_DIR/slurmctld.log"
  out=$(echo "$out" | sort | tr '\n' ' ')
  [ "$out" = "$want" ] || fail 1 "smoke job ran on '$out', expected '$want'" "$LOG_DIR/slurmctld.log"
  SMOKE_NOTE="srun -N$NODES ran on ${out% }"
}

do_start() {
  local t0 t timings=()
  t0=$(now_us)
  [ "$(id -u)" = 0 ] || fail 2 "must run as root (it installs packages and starts daemons)"
  [[ "$NODES" =~ ^[1-9][0-9]*$ ]] || fail 2 "DSE_SLURM_NODES must be a positive number"
  [[ "$ASIDE" =~ ^[0-9]+$ ]] || fail 2 "DSE_SLURM_ASIDE must be a number (0 for none)"
  [[ "$SPARE" =~ ^[0-9]+$ ]] || fail 2 "DSE_SLURM_SPARE must be a number (0 for none)"
  case "$CGROUP" in
    1) cgroup_v1_usable ||
         fail 2 "no writable cgroup v1 memory+freezer hierarchy under /sys/fs/cgroup (Slurm 22.05 needs systemd for cgroup v2); DSE_SLURM_CGROUP=0 runs without cgroups" ;;
    0) ;;
    *) fail 2 "DSE_SLURM_CGROUP must be 1 or 0" ;;
  esac
  exec 9>"$LOCK"; flock 9            # one start/stop at a time

  mkdir -p "$LOG_DIR"; mark_logs
  t=$(now_us); install_packages; timings+=("packages $(secs "$t")s")
  DEADLINE=$(( $(now_us) + TIMEOUT * 1000000 ))   # daemons only; apt has its own timeouts
  t=$(now_us); generate_configs; write_configs; timings+=("config $(secs "$t")s")

  t=$(now_us); wait_for "munged" "/var/log/munge/munged.log $LOG_DIR/daemons.out" munge_ok
  timings+=("munged $(secs "$t")s")
  t=$(now_us); setup_database; timings+=("mariadb $(secs "$t")s")
  t=$(now_us); wait_for "slurmdbd (sacctmgr list cluster)" "$LOG_DIR/slurmdbd.log $LOG_DIR/daemons.out" slurmdbd_ok
  timings+=("slurmdbd $(secs "$t")s")
  t=$(now_us); wait_for "slurmctld (scontrol ping)" "$LOG_DIR/slurmctld.log $LOG_DIR/daemons.out" slurmctld_ok
  timings+=("slurmctld $(secs "$t")s")
  t=$(now_us)
  until nodes_ok >/dev/null 2>&1; do   # like wait_for, but the logs depend on which nodes lag
    # shellcheck disable=SC2046
    (( $(now_us) < DEADLINE )) || fail 1 "timed out after ${TIMEOUT}s waiting for nodes${NOT_READY} to become idle" $(node_logs)
    sleep 0.2
  done
  timings+=("nodes $(secs "$t")s")
  SMOKE_NOTE="off"
  if [ "$SMOKE" = 1 ]; then t=$(now_us); smoke; timings+=("smoke $(secs "$t")s"); fi

  echo "slurm-local: ready in $(secs "$t0")s: $(sinfo -V) cluster=$CLUSTER nodes=$NODELIST cpus/node=$CPUS" \
       "partitions=batch(default),urgent(preempts batch)$([ "$ASIDE" -gt 0 ] && echo ",aside")$([ "$SPARE" -gt 0 ] && echo ",wide") cgroup=$CGROUP accounting=slurmdbd"
  echo "slurm-local: timings: ${timings[*]}"
  echo "slurm-local: smoke: $SMOKE_NOTE"
  sinfo
}

# ------------------------------------------------------------------ stop
do_stop() {
  local t0 ids i left d procs
  t0=$(now_us)
  [ "$(id -u)" = 0 ] || { echo "slurm-local: cannot stop: must run as root" >&3; exit 1; }
  exec 9>"$LOCK"; flock 9
  if alive /run/slurmctld.pid slurmctld; then
    mapfile -t ids < <(squeue -h -o %i 2>/dev/null || true)
    if [ "${#ids[@]}" -gt 0 ]; then
      log "cancelling ${#ids[@]} job(s)"
      scancel "${ids[@]}" 2>/dev/null || true
      for (( i = 0; i < 100; i++ )); do
        [ -n "$(squeue -h -t R,CG,S -o %i 2>/dev/null)" ] || break
        sleep 0.2
      done
    fi
  fi
  # In order: Slurm daemons, then slurmdbd (slurmctld flushes accounting to it on exit),
  # then MariaDB and munged.
  stop_slurm_daemons
  stop_pids slurmdbd 10 /run/slurmdbd.pid
  if [ "$PURGE" = 1 ] && alive /run/mysqld/mysqld.pid mariadbd; then
    mysql -e "DROP DATABASE IF EXISTS $DB_NAME; DROP USER IF EXISTS '$DB_USER'@'localhost'" || true
  fi
  in_parallel "stop_pids mariadbd 60 /run/mysqld/mysqld.pid" "stop_pids munged 10 /run/munge/munged.pid"

  # Job processes live in the per-node cgroups (slurm_nX), outside the caller's process tree.
  # Kill whatever is still in them, then remove the directories bottom-up.
  procs=$(find /sys/fs/cgroup/freezer/slurm_n[0-9]* -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)
  if [ -n "$procs" ]; then
    log "killing leftover job processes: $(echo "$procs" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    kill -KILL $procs 2>/dev/null || true
    sleep 0.3
  fi
  for d in /sys/fs/cgroup/*/slurm_n[0-9]*; do
    if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  left=$(for p in /proc/[0-9]*; do
           [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] && running "${p#/proc/}" && echo "${p#/proc/}"
         done | tr '\n' ' ' || true)
  if [ -n "$left" ]; then log "WARNING: slurmstepd still running (pids: $left)"; fi

  if [ "$PURGE" = 1 ]; then
    log "purging job state, spools and logs"
    rm -rf "${STATE_DIR:?}"/* "${SPOOL_DIR:?}"/* "${LOG_DIR:?}"/*
  fi
  echo "slurm-local: stopped in $(secs "$t0")s"
}

# ------------------------------------------------------------------ status
do_status() {
  local name pidfile comm logf down=0
  while read -r name pidfile comm logf; do
    if alive "$pidfile" "$comm"; then
      printf '%-10s running (pid %s)\n' "$name" "$(pid_of "$pidfile")"
    else
      printf '%-10s not running\n' "$name"; down=1
    fi
  done < <(daemon_table)
  if alive /run/slurmctld.pid slurmctld; then
    echo; sinfo || true
    echo; echo "jobs queued/running: $(squeue -h -o %i 2>/dev/null | wc -l)"
  fi
  return "$down"
}

ACTION=${1:-}
case "$ACTION" in
  start)  do_start ;;
  stop)   do_stop ;;
  status) do_status || exit 3 ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 64 ;;
esac
