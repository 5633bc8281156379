#!/usr/bin/env bash
# Runs a private, real Slurm 22.05 cluster on this one machine, for Holdfast's integration tests
# and experiments. One slurmctld plus N slurmd (nodes n1..nN, partition `main`), authenticated by a
# private munged: nothing in /etc/slurm, /etc/munge or /run/munge is read or touched.
#
#   scripts/slurm-cluster.sh start [--netns] [--nodes N]   # default 3 nodes; restarts if running
#   scripts/slurm-cluster.sh stop                          # idempotent
#   scripts/slurm-cluster.sh env                           # eval "$(scripts/slurm-cluster.sh env)"
#   scripts/slurm-cluster.sh status                        # exit 0 when the cluster is up
#
# Without --netns every slurmd listens on 127.0.0.1 (ports 17001..), so all tasks share one
# network. With --netns each node gets its own network namespace hfnX (address 10.77.0.(10+X)) on
# a bridge hfbr0 (10.77.0.1, where slurmctld is reached); `ip link set hfvX down` then cuts node X
# off the cluster. Needs root, iproute2 and util-linux (nsenter).
#
# State (conf, munge key and socket, spool, logs, pid files) lives in
# ${HOLDFAST_SLURM_DIR:-/tmp/holdfast-slurm}. Optional environment read by `start`:
#   HOLDFAST_SLURM_PROLOG            executable → Prolog= (runs on each node at allocation)
#   HOLDFAST_SLURM_EPILOG_SLURMCTLD  executable → EpilogSlurmctld= (runs on the controller)
#   HOLDFAST_SLURM_SCHED_EXTRA       appended to SchedulerParameters (e.g. nohold_on_prolog_fail)
#   HOLDFAST_SLURM_CONF_EXTRA        raw lines appended to slurm.conf
# Measured facts about this setup: /work/shared/notes/slurm-on-loopback.md (if present).
set -euo pipefail

DIR=${HOLDFAST_SLURM_DIR:-/tmp/holdfast-slurm}
CONF="$DIR/slurm.conf"
CTLD_PORT=16817
SLURMD_PORT_BASE=17000         # node X listens on SLURMD_PORT_BASE + X
BRIDGE=hfbr0
NET_PREFIX=10.77.0             # bridge .1, node X at .(10+X)
UP_TIMEOUT_S=30
DOWN_TIMEOUT_S=10

export SLURM_CONF="$CONF"      # for this script's own scontrol/sinfo/scancel calls only

die() { echo "slurm-cluster: $*" >&2; exit 1; }
log() { echo "slurm-cluster: $*" >&2; }

usage() { # [exit code]
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

now_ms() { date +%s%3N; }

# A pid from a pid file counts as alive only if it is a live (non-zombie) process of that name.
pid_alive() { # pid comm
  local pid=$1 comm=$2 state
  [ -n "$pid" ] && [ -r "/proc/$pid/status" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] || return 1
  state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

pidfile_pid() { if [ -r "$1" ]; then tr -dc '0-9' <"$1"; fi; }

# Lists "pidfile comm" for every daemon this cluster may have started, munged last.
daemon_pidfiles() {
  local f
  echo "$DIR/run/slurmctld.pid slurmctld"
  for f in "$DIR"/run/slurmd-*.pid; do [ -e "$f" ] && echo "$f slurmd"; done
  echo "$DIR/munge/munged.pid munged"
}

# Lists "pid comm" of the live Slurm daemons: from their pid files and from the list `start` saved.
slurm_daemons() {
  local pidfile comm pid
  {
    while read -r pidfile comm; do
      [ "$comm" = munged ] || echo "$(pidfile_pid "$pidfile") $comm"
    done < <(daemon_pidfiles)
    if [ -r "$DIR/run/daemons" ]; then cat "$DIR/run/daemons"; fi
  } | sort -u | while read -r pid comm; do
    if pid_alive "$pid" "$comm"; then echo "$pid $comm"; fi
  done
}

tail_logs() {
  local f
  for f in "$DIR"/log/*.log "$DIR/munge/munged.log"; do
    [ -s "$f" ] || continue
    echo "---- tail $f" >&2
    tail -n 15 "$f" >&2
  done
}

need_cmd() { # cmd package
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found: install Debian package '$2' (scripts/setup.sh does)"
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

# ---------------------------------------------------------------- network namespaces
netns_create() { # nodes
  local n=$1 x ns veth
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET_PREFIX.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for x in $(seq 1 "$n"); do
    ns=hfn$x veth=hfv$x
    ip netns add "$ns"
    ip link add "$veth" type veth peer name "${veth}p"
    ip link set "${veth}p" netns "$ns"
    ip -n "$ns" link set "${veth}p" name eth0
    ip -n "$ns" addr add "$NET_PREFIX.$((10 + x))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    # No default route on purpose: slurmd reverse-resolves every peer address, and with a route
    # the DNS query leaves the namespace and times out (10 s per RPC); without one it fails at once.
    ip link set "$veth" master "$BRIDGE" up
  done
}

# Registration (node idle) proved namespace → controller; this proves controller → each slurmd.
netns_check() { # nodes
  local x addr
  for x in $(seq 1 "$1"); do
    addr="$NET_PREFIX.$((10 + x))/$((SLURMD_PORT_BASE + x))"
    timeout 3 bash -c "exec 3<>/dev/tcp/$addr" 2>/dev/null ||
      { tail_logs; die "cannot connect from the root namespace to slurmd n$x at $addr"; }
  done
}

# Undoes test-made partitions (`ip link set hfvX down`) so that jobs and slurmds end cleanly.
netns_heal() {
  command -v ip >/dev/null 2>&1 || return 0
  local veth
  for veth in $(hf_veths); do ip link set "$veth" up 2>/dev/null || true; done
}

hf_veths() {
  ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -E '^hfv[0-9]+$' || true
}

# Removes every hfnX namespace, hfvX veth and the bridge; processes still inside a namespace
# (job tasks a dead slurmd left behind) are killed first, since deleting a namespace does not.
netns_destroy() {
  command -v ip >/dev/null 2>&1 || return 0
  local ns pids veth
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^hfn[0-9]+$/ {print $1}'); do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    if [ -n "${pids// }" ]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      sleep 0.5
      pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
      # shellcheck disable=SC2086
      [ -z "${pids// }" ] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns delete "$ns" 2>/dev/null || true
  done
  for veth in $(hf_veths); do
    ip link delete "$veth" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE"; fi
}

# ---------------------------------------------------------------- configuration
write_conf() { # nodes netns
  local n=$1 netns=$2 host ctld_addr mem_mb sched x
  host=$(hostname -s)
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  [ "$mem_mb" -gt 2000 ] && mem_mb=2000
  sched="batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=1"
  [ -n "${HOLDFAST_SLURM_SCHED_EXTRA:-}" ] && sched="$sched,$HOLDFAST_SLURM_SCHED_EXTRA"
  if [ "$netns" = 1 ]; then ctld_addr="$NET_PREFIX.1"; else ctld_addr=127.0.0.1; fi

  cat >"$CONF" <<EOF
# Generated by scripts/slurm-cluster.sh; rewritten on every start.
ClusterName=holdfast
SlurmctldHost=$host($ctld_addr)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=$sched
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MailProg=/bin/true
KillWait=5
MinJobAge=30
SlurmdTimeout=30
InactiveLimit=0
PrologFlags=Alloc
EOF
  if [ -n "${HOLDFAST_SLURM_PROLOG:-}" ]; then
    [ -x "$HOLDFAST_SLURM_PROLOG" ] || die "HOLDFAST_SLURM_PROLOG=$HOLDFAST_SLURM_PROLOG is not executable"
    echo "Prolog=$(readlink -f "$HOLDFAST_SLURM_PROLOG")" >>"$CONF"
  fi
  if [ -n "${HOLDFAST_SLURM_EPILOG_SLURMCTLD:-}" ]; then
    [ -x "$HOLDFAST_SLURM_EPILOG_SLURMCTLD" ] ||
      die "HOLDFAST_SLURM_EPILOG_SLURMCTLD=$HOLDFAST_SLURM_EPILOG_SLURMCTLD is not executable"
    echo "EpilogSlurmctld=$(readlink -f "$HOLDFAST_SLURM_EPILOG_SLURMCTLD")" >>"$CONF"
  fi
  local cpu="CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=$mem_mb State=UNKNOWN"
  if [ "$netns" = 1 ]; then
    for x in $(seq 1 "$n"); do
      echo "NodeName=n$x NodeHostname=$host NodeAddr=$NET_PREFIX.$((10 + x)) Port=$((SLURMD_PORT_BASE + x)) $cpu"
    done >>"$CONF"
  else
    echo "NodeName=n[1-$n] NodeHostname=$host NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + 1))-$((SLURMD_PORT_BASE + n)) $cpu" >>"$CONF"
  fi
  echo "PartitionName=main Nodes=n[1-$n] Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
  if [ -n "${HOLDFAST_SLURM_CONF_EXTRA:-}" ]; then
    printf '%s\n' "# HOLDFAST_SLURM_CONF_EXTRA" "$HOLDFAST_SLURM_CONF_EXTRA" >>"$CONF"
  fi

  # 22.05 autodetects the cgroup version and kills slurmd where none is mounted; pin v1 (unused
  # anyway with proctrack/linuxproc and task/none).
  echo "CgroupPlugin=cgroup/v1" >"$DIR/cgroup.conf"
}

start_munged() {
  local m="$DIR/munge"
  mkdir -p "$m"
  chmod 711 "$m"
  dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
  chmod 400 "$m/munge.key"
  munged --key-file="$m/munge.key" --socket="$m/munge.socket" --pid-file="$m/munged.pid" \
         --log-file="$m/munged.log" --seed-file="$m/munged.seed" ||
    { tail_logs; die "munged failed to start"; }
  for _ in $(seq 1 100); do [ -S "$m/munge.socket" ] && return 0; sleep 0.05; done
  tail_logs; die "munged socket $m/munge.socket did not appear"
}

wait_for() { # description timeout_s command...
  local what=$1 timeout=$2 deadline
  shift 2
  deadline=$(( $(now_ms) + timeout * 1000 ))
  until "$@"; do
    if [ "$(now_ms)" -ge "$deadline" ]; then
      log "timed out after ${timeout}s waiting for $what"
      tail_logs
      return 1
    fi
    sleep 0.05
  done
}

all_nodes_idle() { # nodes
  [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -eq "$1" ]
}

cmd_start() {
  local nodes=3 netns=0
  while [ $# -gt 0 ]; do
    case $1 in
      --netns) netns=1 ;;
      --nodes) [ $# -ge 2 ] || usage; nodes=$2; shift ;;
      --nodes=*) nodes=${1#--nodes=} ;;
      -h|--help) usage 0 ;;
      *) log "unknown option '$1'"; usage ;;
    esac
    shift
  done
  [[ "$nodes" =~ ^[1-9][0-9]*$ && "$nodes" -le 64 ]] || die "--nodes wants 1..64, got '$nodes'"
  [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd, SlurmUser=root, namespaces)"
  need_cmd munged munge
  need_cmd slurmctld slurmctld
  need_cmd slurmd slurmd
  need_cmd scontrol slurm-client
  if [ "$netns" = 1 ]; then need_cmd ip iproute2; need_cmd nsenter util-linux; fi

  local t0
  t0=$(now_ms)
  cmd_stop quiet
  rm -rf "${DIR:?}"/{state,spool,log,run,munge}
  mkdir -p "$DIR"/{state,log,run}
  chmod 755 "$DIR"
  for x in $(seq 1 "$nodes"); do mkdir -p "$DIR/spool/n$x"; done
  printf 'nodes=%s\nnetns=%s\n' "$nodes" "$netns" >"$DIR/cluster.info"

  write_conf "$nodes" "$netns"
  [ "$netns" = 1 ] && netns_create "$nodes"
  start_munged

  slurmctld -f "$CONF" -i || { tail_logs; die "slurmctld failed to start"; }
  wait_for "slurmctld (scontrol ping)" "$UP_TIMEOUT_S" ctld_up || { cmd_stop quiet; exit 1; }
  local x
  for x in $(seq 1 "$nodes"); do
    if [ "$netns" = 1 ]; then
      nsenter --net="/run/netns/hfn$x" slurmd -f "$CONF" -N "n$x"
    else
      slurmd -f "$CONF" -N "n$x"
    fi || { tail_logs; cmd_stop quiet; die "slurmd n$x failed to start"; }
  done
  wait_for "$nodes node(s) idle (sinfo -t idle)" "$UP_TIMEOUT_S" all_nodes_idle "$nodes" ||
    { sinfo -N -l >&2 || true; cmd_stop quiet; exit 1; }
  [ "$netns" = 1 ] && netns_check "$nodes"
  slurm_daemons >"$DIR/run/daemons"
  log "up: $nodes node(s)$([ "$netns" = 1 ] && echo ' in network namespaces') in $(( $(now_ms) - t0 )) ms; state in $DIR"
  log "use: eval \"\$($0 env)\""
}

cmd_stop() { # [quiet]
  local t0 deadline pid comm phase alive
  t0=$(now_ms)
  # slurmd deletes its pid file as soon as it begins to shut down, so note the pids first.
  local -a daemons=()
  mapfile -t daemons < <(slurm_daemons)
  netns_heal
  if [ -r "$CONF" ] && [ -S "$DIR/munge/munge.socket" ] && ctld_up; then
    # Cancel every job and let them finish (KillWait is 5 s) so no slurmstepd outlives slurmd.
    local jobs
    deadline=$(( $(now_ms) + 10000 ))
    while jobs=$(squeue -h -o %A 2>/dev/null) && [ -n "$jobs" ] && [ "$(now_ms)" -lt "$deadline" ]; do
      # shellcheck disable=SC2086
      scancel --quiet $jobs 2>/dev/null || true
      sleep 0.1
    done
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  # Wait for the Slurm daemons, then TERM / KILL what is left (e.g. a slurmd cut off in its
  # namespace never hears the shutdown). munged goes last: the others need it to shut down.
  for phase in wait term kill; do
    case $phase in
      wait) deadline=$(( $(now_ms) + DOWN_TIMEOUT_S * 1000 )) ;;
      term) deadline=$(( $(now_ms) + 5000 )) ;;
      kill) deadline=$(( $(now_ms) + 2000 )) ;;
    esac
    alive=0
    for line in "${daemons[@]}"; do
      read -r pid comm <<<"$line"
      pid_alive "$pid" "$comm" || continue
      alive=1
      case $phase in
        term) kill -TERM "$pid" 2>/dev/null || true ;;
        kill) kill -KILL "$pid" 2>/dev/null || true ;;
      esac
    done
    while [ "$alive" = 1 ] && [ "$(now_ms)" -lt "$deadline" ]; do
      sleep 0.05
      alive=0
      for line in "${daemons[@]}"; do
        read -r pid comm <<<"$line"
        if pid_alive "$pid" "$comm"; then alive=1; break; fi
      done
    done
    [ "$alive" = 0 ] && break
    [ "$phase" = wait ] && log "Slurm daemons still up ${DOWN_TIMEOUT_S}s after shutdown; sending TERM"
  done
  pid=$(pidfile_pid "$DIR/munge/munged.pid")
  if pid_alive "$pid" munged; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do pid_alive "$pid" munged || break; sleep 0.05; done
  fi
  netns_destroy
  rm -f "$DIR/cluster.info"
  [ "${1:-}" = quiet ] || log "stopped in $(( $(now_ms) - t0 )) ms"
}

cmd_env() {
  [ -r "$CONF" ] || die "no cluster configuration in $DIR; run '$0 start' first"
  printf 'export SLURM_CONF=%q\n' "$CONF"
  printf 'export HOLDFAST_SLURM_DIR=%q\n' "$DIR"
}

cmd_status() {
  local up=1 pidfile comm pid
  if [ -r "$DIR/cluster.info" ]; then
    echo "cluster: $(tr '\n' ' ' <"$DIR/cluster.info")dir=$DIR"
  else
    echo "cluster: not started (dir=$DIR)"
    up=0
  fi
  while read -r pidfile comm; do
    pid=$(pidfile_pid "$pidfile")
    if pid_alive "$pid" "$comm"; then
      echo "  $comm $(basename "$pidfile" .pid): running, pid $pid"
    else
      echo "  $comm $(basename "$pidfile" .pid): not running"
      up=0
    fi
  done < <(daemon_pidfiles)
  if [ "$up" = 1 ] && ctld_up; then
    sinfo -N -o '  %N %T %E' || true
    return 0
  fi
  return 1
}

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) shift; [ $# -eq 0 ] || usage; cmd_stop ;;
  env) cmd_env ;;
  status) cmd_status ;;
  -h|--help|help) usage 0 ;;
  '') usage ;;
  *) log "unknown command '$1'"; usage ;;
esac
