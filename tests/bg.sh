# Background commands for the shell tests; sourced after lib.sh. launch starts one with
# the default signal dispositions, wait_pid waits for one with a time limit, wait_for
# polls a condition while one runs, kill_bg kills every one still running (call it from
# the script's EXIT trap).
bgpids=""
kill_bg() { for p in $bgpids; do kill -9 "$p" 2>/dev/null; done; }

# Starts a command in the background with SIGINT, SIGQUIT, SIGTERM and SIGHUP at their
# defaults (sh starts background jobs with SIGINT and SIGQUIT ignored) and the given
# environment; python execs the command (the libtool wrapper execs tartan), so $! is
# tartan's pid.
EXEC_PY='import os, signal, sys
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_DFL)
a = sys.argv[1:]
while a[0] != "--":
    k, v = a.pop(0).split("=", 1)
    os.environ[k] = v
os.execvp(a[1], a[1:])'
launch() { # STDOUT STDERR [VAR=VALUE...] -- CMD...: sets lpid
    lo=$1; le=$2; shift 2
    "$PY" -c "$EXEC_PY" "$@" </dev/null >"$lo" 2>"$le" &
    lpid=$!
    bgpids="$bgpids $lpid"
}
wait_pid() { # PID SECONDS: waits for PID; its exit status in $wrc ("timeout": killed)
    wi=0
    while kill -0 "$1" 2>/dev/null && [ $wi -lt $(($2 * 20)) ]; do
        sleep 0.05
        wi=$((wi + 1))
    done
    if kill -0 "$1" 2>/dev/null; then
        kill -9 "$1" 2>/dev/null
        wait "$1" 2>/dev/null
        wrc=timeout
    else
        wait "$1"
        wrc=$?
    fi
}
wait_for() { # SECONDS PID TEST...: polls until TEST holds, PID ended or time is up
    ws=$1; wp=$2; shift 2
    wi=0
    while [ $wi -lt $((ws * 100)) ]; do
        "$@" && return 0
        kill -0 "$wp" 2>/dev/null || { "$@"; return $?; }
        sleep 0.01
        wi=$((wi + 1))
    done
    return 1
}
