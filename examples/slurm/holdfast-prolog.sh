#!/bin/bash
# Slurm Prolog (with PrologFlags=Alloc: runs on every node of a job before it
# starts). A node that fails holdfast-health's fast checks is drained with the
# failed check as its reason (`sinfo -R`), and Slurm requeues the job onto
# other nodes. Installed as <prefix>/libexec/holdfast/holdfast-prolog.sh (the
# .deb: /usr/libexec/holdfast/holdfast-prolog.sh); slurm.conf:
#   Prolog=/usr/libexec/holdfast/holdfast-prolog.sh   PrologFlags=Alloc
#   PrologEpilogTimeout=60    # longer than this script can take: TIMEOUT + 5 s + 20 s (below)
# Slurm does not rerun a Prolog on a node that already ran it for the job after
# a requeue: holdfastd's own pre-launch checks cover every attempt.
#
# What it does with holdfast-health's answer (docs/health.md, "The Prolog"):
#   passed                       exit 0
#   a check failed (exit 1 and   drain the node with the check's reason, exit 1;
#   a "holdfast: ..." line),     report mode: log "would drain", exit 0
#   or hung past the timeout
#   the checker is broken        log it loudly (this log and syslog) and exit 0, so that a
#   (missing, not executable,    botched rollout does not drain every node; with
#   killed by a signal, an       HOLDFAST_PROLOG_ON_BROKEN=drain: drain, the breakage as the reason
#   exit code it never uses, a
#   bad health config)
#
# Settings: the environment, else /etc/holdfast/prolog.conf (HOLDFAST_PROLOG_CONF;
# KEY=VALUE lines, '#' comments, read, never run; root's own, not writable by
# others), else the default:
#   HOLDFAST_PROLOG_MODE=enforce     enforce | report (a staged rollout: drain nothing)
#   HOLDFAST_PROLOG_TIMEOUT=30       seconds holdfast-health may take: a hung check fails
#                                    naming itself; one that ignores signals (stuck in the
#                                    kernel) is killed 5 s later and the node drained
#   HOLDFAST_PROLOG_ON_BROKEN=pass   pass | drain
#   HOLDFAST_PROLOG_LOG=/var/log/slurm/holdfast-prolog.log
# A prolog.conf that cannot be read as above is a broken checker too, and passes
# whatever its ON_BROKEN says: settings that cannot be trusted drain nothing.
#
# holdfast-health is $HOLDFAST_HEALTH, else the installed one: the installed copy
# of this script has the path from its folder to the programs' folder on the next
# line (cmake/HoldfastInstall.cmake); this copy in examples/slurm takes it from PATH.
holdfast_programs_from_here=
if [ -n "$holdfast_programs_from_here" ]; then
  default_health=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/$holdfast_programs_from_here/holdfast-health
else
  default_health=holdfast-health
fi
HOLDFAST_HEALTH=${HOLDFAST_HEALTH:-$default_health}
HEALTH_CONFIG=${HEALTH_CONFIG:-/etc/holdfast/health.toml}
node=${SLURMD_NODENAME:-$(hostname -s)}

conf_error=
read_settings() {  # the file's values become file_MODE, file_TIMEOUT, ...; the first error stops
  local conf=${HOLDFAST_PROLOG_CONF:-/etc/holdfast/prolog.conf} line n=0 key value owner mode
  [ -e "$conf" ] || return 0
  if ! { read -r owner mode < <(stat -L -c '%u %a' "$conf"); } 2>/dev/null || [ ! -r "$conf" ]; then
    conf_error="$conf: cannot be read"; return 1
  fi
  if [ "$owner" != "$(id -u)" ] || (( 8#$mode & 8#022 )); then
    conf_error="$conf: must belong to $(id -un) and be writable by no one else (it is uid $owner, mode $mode)"
    return 1
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line%%#*}
    [[ $line =~ ^[[:space:]]*$ ]] && continue
    if ! [[ $line =~ ^[[:space:]]*HOLDFAST_PROLOG_(MODE|TIMEOUT|ON_BROKEN|LOG)=([A-Za-z0-9_./:-]*)[[:space:]]*$ ]]; then
      conf_error="$conf:$n: '$line' is not HOLDFAST_PROLOG_{MODE,TIMEOUT,ON_BROKEN,LOG}=VALUE"; return 1
    fi
    key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
    printf -v "file_$key" '%s' "$value"
  done <"$conf"
}

read_settings
MODE=${HOLDFAST_PROLOG_MODE:-${file_MODE:-enforce}}
TIMEOUT=${HOLDFAST_PROLOG_TIMEOUT:-${file_TIMEOUT:-30}}
ON_BROKEN=${HOLDFAST_PROLOG_ON_BROKEN:-${file_ON_BROKEN:-pass}}
LOG=${HOLDFAST_PROLOG_LOG:-${file_LOG:-/var/log/slurm/holdfast-prolog.log}}
if [ -z "$conf_error" ]; then
  case $MODE in enforce | report) ;; *) conf_error="HOLDFAST_PROLOG_MODE='$MODE' is not enforce or report" ;; esac
  case $ON_BROKEN in pass | drain) ;; *) conf_error="HOLDFAST_PROLOG_ON_BROKEN='$ON_BROKEN' is not pass or drain" ;; esac
  [[ $TIMEOUT =~ ^[0-9]+$ ]] && ((TIMEOUT >= 1 && TIMEOUT <= 3600)) ||
    conf_error="HOLDFAST_PROLOG_TIMEOUT='$TIMEOUT' is not a number of seconds from 1 to 3600"
fi

log() {
  local line
  line="$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) $node job ${SLURM_JOB_ID:-?}: $*"
  { echo "$line" >>"$LOG"; } 2>/dev/null || echo "$line" >&2
}
loud() {  # a broken checker: also to syslog, where a site's alerting looks
  log "$*"
  command -v logger >/dev/null && logger -t holdfast-prolog -p daemon.err -- "$node: $*" 2>/dev/null
  return 0
}

# slurmd ends a Prolog that outlives PrologEpilogTimeout with SIGTERM to its process group,
# which the checker (a session of its own) is not in: take it along.
checker_pid=
on_signal() {
  [ -n "$checker_pid" ] && kill -KILL -- "-$checker_pid" "$checker_pid" 2>/dev/null
  log "stopped by SIG$1 (is slurm.conf's PrologEpilogTimeout shorter than ${TIMEOUT} s + 25 s?); holdfast-health killed"
  exit 1
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

# Runs holdfast-health in a session of its own, its answer in a file (no pipe that a stuck
# process could keep open under slurmd), and waits at most TIMEOUT + 5 s: it fails a hung check
# itself at TIMEOUT; past that it ignores signals, so it is killed and not waited for.
# Sets rc (its exit code, 128+N for signal N, "missing" or "stuck") and answer (its stdout).
run_checker() {
  rc='' answer=''
  local prog=$HOLDFAST_HEALTH out pid tenths limit=$(( (TIMEOUT + 5) * 10 ))
  if [[ $prog != */* ]]; then prog=$(command -v -- "$prog") || { rc=missing answer="$HOLDFAST_HEALTH: not found on PATH"; return; }; fi
  if [ ! -f "$prog" ] || [ ! -x "$prog" ]; then rc=missing answer="$prog: not an executable file"; return; fi
  local args=(--prolog --timeout "$TIMEOUT")
  [ -r "$HEALTH_CONFIG" ] && args+=(--config "$HEALTH_CONFIG")
  out=$(mktemp "${TMPDIR:-/tmp}/holdfast-prolog.XXXXXX") || { rc=missing answer="mktemp failed"; return; }
  # A background job of a shell without job control is never a process group leader, so
  # setsid makes it one without forking: $! is the checker and the leader of its session.
  local session=(setsid)
  command -v setsid >/dev/null || session=()
  "${session[@]}" "$prog" "${args[@]}" </dev/null >"$out" 2>>"$LOG" &
  pid=$!
  checker_pid=$pid
  for ((tenths = 0; tenths < limit; tenths++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" "$pid" 2>/dev/null
    rc=stuck
  else
    wait "$pid"
    rc=$?
    answer=$(head -c 300 "$out")
  fi
  checker_pid=
  rm -f "$out"
}

# The decision, from rc and answer alone: verdict (pass, fail, broken) and why.
decide() {
  case $rc in
    0) verdict=pass why= ;;
    1) if [[ $answer == "holdfast: "* ]]; then
         verdict=fail why="holdfast-health: ${answer#holdfast: }"
       else
         verdict=broken why="holdfast-health exited 1 without a drain reason"
       fi ;;
    2) if [[ $answer == "holdfast: health config error: "* ]]; then
         verdict=broken why="holdfast-health: configuration error: ${answer#holdfast: health config error: }"
       else
         verdict=broken why="holdfast-health exited 2 (a usage error) without a reason"
       fi ;;
    stuck) verdict=fail why="holdfast-prolog: holdfast-health stuck past its ${TIMEOUT} s timeout (killed; a driver hung in the kernel?)" ;;
    missing) verdict=broken why=$answer ;;
    *) if ((rc > 128)); then
         verdict=broken why="holdfast-health killed by SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))"
       else
         verdict=broken why="holdfast-health exited $rc, a code it does not use"
       fi ;;
  esac
  why=${why//[^[:print:]]/ }
  why=${why:0:200}
}

drain() {  # reason
  if ! timeout 20 scontrol update nodename="$node" state=drain reason="$1" >/dev/null 2>&1; then
    log "could not drain $node through scontrol (Slurm drains it with reason 'Prolog error')"
  fi
}

started=$(date +%s.%N)
if [ -n "$conf_error" ]; then
  loud "BROKEN SETTINGS, not checking, node left up: $conf_error"
  exit 0
fi
run_checker
decide
took=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
case $verdict in
  pass)
    log "pass (${took} s)"
    exit 0 ;;
  fail)
    if [ "$MODE" = report ]; then
      log "report-only: would drain $node: $why (${took} s)"
      exit 0
    fi
    log "drain $node: $why (${took} s)"
    drain "$why"
    exit 1 ;;
  broken)
    if [ "$ON_BROKEN" = drain ] && [ "$MODE" != report ]; then
      loud "BROKEN CHECKER, draining $node (HOLDFAST_PROLOG_ON_BROKEN=drain): $why"
      drain "holdfast-prolog: checker broken: $why"
      exit 1
    fi
    setting="HOLDFAST_PROLOG_ON_BROKEN=$ON_BROKEN"
    [ "$MODE" = report ] && setting="HOLDFAST_PROLOG_MODE=report"
    loud "BROKEN CHECKER, node left up ($setting): $why"
    exit 0 ;;
esac
