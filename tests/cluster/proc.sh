# tests/cluster/proc.sh — process bookkeeping for the cluster test scripts
# (sourced by tests/cluster/test_node.sh and tests/cluster/test_transport.sh),
# and na_free_port: a TCP port picked at run time, so that overlapping runs
# (Release and ASan builds, two developers) never share fixed ports.
#
# Every background process a script starts runs in a session of its own
# (setsid). A background child of a non-interactive shell is never a process
# group leader, so setsid does not fork: $! is the program itself and its
# session id. Whatever it starts in turn — `nearattn launch`'s nodes,
# mpirun's ranks, `ip netns exec`'s child — stays in that session even when
# its parent dies and it is re-parented to init, so na_reap finds it by
# session id (pkill -s/pgrep -s: only sessions this script made).
#
# Use: na_spawn LOGFILE CMD... (pid/session in NA_PID), na_run_bg likewise for
# foreground-like runs that must stay interruptible, and
#   trap na_reap EXIT; trap 'exit 1' INT TERM HUP PIPE
# so that every exit path — pass, fail, a signal from ctest's timeout — stops
# all of them.

NA_SIDS=""

# na_spawn LOGFILE CMD...: start CMD in a new session, stdout+stderr to LOGFILE.
na_spawn() {
    _na_log=$1
    shift
    setsid "$@" >"$_na_log" 2>&1 &
    NA_PID=$!
    NA_SIDS="$NA_SIDS $NA_PID"
}

# na_alive SID: 0 while any process of session SID is alive.
na_alive() {
    pgrep -s "$1" >/dev/null 2>&1
}

# na_reap: SIGTERM every session started here, give them 2 s, then SIGKILL
# what is left (grandchildren included) and wait for direct children. Safe to
# call twice.
na_reap() {
    _na_left=""
    for _na_s in $NA_SIDS; do
        if na_alive "$_na_s"; then
            pkill -TERM -s "$_na_s" 2>/dev/null
            _na_left="$_na_left $_na_s"
        fi
    done
    _na_n=0
    while [ -n "$_na_left" ] && [ "$_na_n" -lt 20 ]; do
        _na_still=""
        for _na_s in $_na_left; do
            na_alive "$_na_s" && _na_still="$_na_still $_na_s"
        done
        _na_left=$_na_still
        [ -n "$_na_left" ] && sleep 0.1
        _na_n=$((_na_n + 1))
    done
    for _na_s in $_na_left; do
        pkill -KILL -s "$_na_s" 2>/dev/null
    done
    for _na_s in $_na_left; do
        _na_n=0
        while na_alive "$_na_s" && [ "$_na_n" -lt 50 ]; do
            sleep 0.1
            _na_n=$((_na_n + 1))
        done
        na_alive "$_na_s" && echo "WARNING: session $_na_s still has processes after SIGKILL"
    done
    wait 2>/dev/null
    NA_SIDS=""
}

# na_port_busy PORT: 0 when something listens on (or holds) 127.0.0.1:PORT /
# *:PORT. Uses `ss -ltn` when present, else a bash /dev/tcp connect probe.
na_port_busy() {
    if command -v ss >/dev/null 2>&1; then
        ss -Htan 2>/dev/null | awk -v p=":$1" '{ if (substr($4, length($4) - length(p) + 1) == p) f = 1 }
                                              END { exit f ? 0 : 1 }'
        return $?
    fi
    command -v bash >/dev/null 2>&1 || return 1
    bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# na_port_top: the first port of the kernel's ephemeral range (outgoing
# connections take ports from there at any moment, so ours stay below it).
na_port_top() {
    _na_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null | tr -d ' ')
    case "$_na_lo" in ''|*[!0-9]*) _na_lo=32768 ;; esac
    [ "$_na_lo" -gt 21000 ] || _na_lo=32768
    echo "$_na_lo"
}

# na_free_port [EXCLUDE...]: print a random TCP port from 20000 up to the ephemeral range that
# nothing uses now (no listener, no connection in any state, e.g. TIME_WAIT)
# and that is not one of EXCLUDE (ports already picked by this script).
# A port is only checked, not reserved: the caller binds it right away.
# Returns 1 (prints nothing) when 200 tries found none.
na_free_port() {
    _na_try=0
    while [ "$_na_try" -lt 200 ]; do
        _na_try=$((_na_try + 1))
        _na_p=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
        _na_p=$((20000 + _na_p % ($(na_port_top) - 20000)))
        _na_dup=0
        for _na_x in "$@"; do
            [ "$_na_x" = "$_na_p" ] && _na_dup=1
        done
        [ "$_na_dup" = 1 ] && continue
        na_port_busy "$_na_p" && continue
        echo "$_na_p"
        return 0
    done
    return 1
}

# na_free_ports N: print the first of N consecutive TCP ports from 20000 up to the ephemeral range
# that nothing uses now (see na_free_port). Returns 1 when 200 tries found none.
na_free_ports() {
    _na_try=0
    while [ "$_na_try" -lt 200 ]; do
        _na_try=$((_na_try + 1))
        _na_b=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
        _na_b=$((20000 + _na_b % ($(na_port_top) - 20000 - $1)))
        _na_i=0
        while [ "$_na_i" -lt "$1" ] && ! na_port_busy $((_na_b + _na_i)); do
            _na_i=$((_na_i + 1))
        done
        if [ "$_na_i" -eq "$1" ]; then
            echo "$_na_b"
            return 0
        fi
    done
    return 1
}

# na_bg OUT ERR CMD...: start CMD in a session of its own,
# stdout to OUT, stderr to ERR; its pid (= session id) in NA_PID.
na_bg() {
    _o=$1; _e=$2; shift 2
    if [ "$_o" = "$_e" ]; then
        setsid "$@" >"$_o" 2>&1 &
    else
        setsid "$@" >"$_o" 2>"$_e" &
    fi
    NA_PID=$!
    NA_SIDS="$NA_SIDS $NA_PID"
}
# na_fg OUT ERR CMD...: na_bg and wait for it; returns its exit status. A
# signal to this script interrupts the wait and na_reap stops the session.
na_fg() {
    na_bg "$@"
    wait "$NA_PID"
}
