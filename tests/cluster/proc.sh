# tests/cluster/proc.sh — process bookkeeping for the cluster test scripts
# (sourced by tests/cluster/test_node.sh and tests/cluster/test_transport.sh).
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
