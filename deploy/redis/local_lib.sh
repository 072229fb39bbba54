# deploy/redis/local_lib.sh: what the local Redis launchers (deploy/redis-ha/sentinel.sh and
# deploy/redis-cluster/cluster.sh) share, sourced after they set
#   TAG   their name in messages (redis-ha, redis-cluster); the default state folder is run/TAG
#   OPTS  their options besides --dir, as "name:VAR ...": --name VALUE sets VAR
#   ENVF_NAME  the file in DIR that remembers VAR of every option between commands
#   ROOT  the repository root
# then call `launcher_args "$@"`: cmd is the command, DIR the state folder (absolute, created), ENVF the
# remembered settings, and each VAR its value: the command line's, else the remembered one, else empty
# (the script applies its defaults). Also: messages, redis-cli on a port, pid files, waiting for PING,
# stopping a process, and --help (the comment block at the top of the script).

say() { echo "$TAG: $*"; }
die() { echo "$TAG: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# The VAR of option --NAME (from OPTS), or fail.
opt_var() {
  for o in $OPTS; do [ "$1" = "--${o%%:*}" ] && { echo "${o#*:}"; return 0; }; done
  return 1
}

launcher_args() {
  cmd=${1:-}; [ $# -gt 0 ] && shift
  case "$cmd" in -h|--help) cmd=help;; esac
  DIR=""
  for o in $OPTS; do eval "O_${o#*:}=''"; done
  while [ $# -gt 0 ]; do
    case "$1" in -h|--help) cmd=help; break;; esac
    if [ "$1" = --dir ]; then var=DIR; else var=$(opt_var "$1") && var=O_$var; fi
    [ -n "$var" ] || { echo "$TAG: unknown option $1 (see $(basename "$0") --help)" >&2; exit 2; }
    [ $# -ge 2 ] || { echo "$TAG: $1 wants a value (see $(basename "$0") --help)" >&2; exit 2; }
    eval "$var=\$2"
    var=""
    shift 2
  done
  [ -z "$DIR" ] && DIR=$ROOT/run/$TAG
  case "$cmd" in help|"") usage; exit 0;; esac # (before the folder is made: --help left an empty run/TAG/)
  mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd) || exit 1
  ENVF=$DIR/$ENVF_NAME
  for o in $OPTS; do eval "${o#*:}=''"; done
  # shellcheck disable=SC1090
  [ -f "$ENVF" ] && . "$ENVF"
  for o in $OPTS; do eval "[ -n \"\$O_${o#*:}\" ] && ${o#*:}=\$O_${o#*:}"; done
  return 0
}

# Remember every option's value in ENVF (the next command needs only --dir).
save_env() {
  for o in $OPTS; do eval "echo \"${o#*:}='\$${o#*:}'\""; done > "$ENVF"
}

cli() { p=$1; shift; redis-cli -h 127.0.0.1 -p "$p" "$@"; }

# A live redis-server or redis-sentinel (a zombie has an empty cmdline: exited, not yet reaped).
alive() { kill -0 "$1" 2>/dev/null && grep -q redis- "/proc/$1/cmdline" 2>/dev/null; }

pid_of() { # PIDFILE -> pid of a live process, or fail
  [ -f "$1" ] || return 1
  pid=$(cat "$1")
  alive "$pid" && echo "$pid"
}

wait_ping() { # PORT LOG
  n=0
  until cli "$1" ping 2>/dev/null | grep -q PONG; do
    n=$((n + 1)); [ $n -ge 100 ] && die "port $1 does not answer PING (see $2)"
    sleep 0.1
  done
}

# Stop the process of PIDFILE (SHUTDOWN through PORT when given, else SIGTERM; SIGKILL after 10 s).
stop_pid() { # PIDFILE WHAT [PORT]
  if pid=$(pid_of "$1"); then
    { [ -n "${3:-}" ] && cli "$3" shutdown >/dev/null 2>&1; } || kill -TERM "$pid" 2>/dev/null
    n=0; while alive "$pid" && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    alive "$pid" && kill -KILL "$pid"
    say "$2 stopped"
  fi
}
