# tests/cluster/proc.sh — process bookkeeping for the cluster test scripts
# (sourced by tests/cluster/test_*.sh), na_free_port: a TCP port picked at
# run time, so that overlapping runs (Release and ASan builds, two developers)
# never share fixed ports, and the start every script shares: na_test_init
# (temporary directory, traps), fail, na_wait_line, na_vs_mono.
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

# A run's private node logs ($TMPDIR/nearattn-run-*.log) are removed at its
# end when all went well; the scripts read them (and show them on failure).
NA_KEEP_LOGS=1
export NA_KEEP_LOGS

# Bounds (hang detectors `timeout N`, waits for a line) are written for a
# Release build; ctest gives NA_TEST_TIME_SCALE (4 in the sanitizer build,
# cmake/NaHelpers.cmake) and the scripts multiply them by NA_TS, so that a
# slower build or a busy machine never turns a wait into a failure. Timing
# figures that are themselves checked are not scaled.
NA_TS=${NA_TEST_TIME_SCALE:-1}
case $NA_TS in ''|*[!0-9]*) NA_TS=1 ;; esac
export NA_TS

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

# na_test_init NAME: BIN (NA_BIN, required), SRC (NA_SOURCE_DIR, required),
# SHARED (NA_SHARED_DIR, default SRC/../shared) and DIR, a fresh temporary
# directory NAME.XXXXXX; at exit na_cleanup, and INT TERM HUP PIPE exit 1.
na_test_init() {
    BIN=${NA_BIN:?NA_BIN must name the nearattn binary}
    SRC=${NA_SOURCE_DIR:?}
    SHARED=${NA_SHARED_DIR:-$SRC/../shared}
    na_tmpdir "$1"
}
# na_tmpdir NAME: na_test_init's DIR and traps alone.
na_tmpdir() {
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    trap na_cleanup EXIT
    trap 'exit 1' INT TERM HUP PIPE
}
# na_cleanup: na_reap (every process started here, mpirun's ranks included),
# then NA_CLEANUP (a command: more to undo, e.g. network namespaces) when set,
# a copy of DIR in $NA_TEST_KEEP when set, and DIR removed.
na_cleanup() {
    na_reap
    [ -n "${NA_CLEANUP:-}" ] && eval "$NA_CLEANUP"
    [ -n "${NA_TEST_KEEP:-}" ] && cp -r "$DIR" "$NA_TEST_KEEP"
    rm -rf "$DIR"
}

# fail MSG...: print "FAIL: MSG", the last NA_TAIL (30) lines of every log
# that the patterns in NA_LOGS (under DIR; default *.log) name, exit 1.
fail() {
    echo "FAIL: $*"
    set -f
    for _na_g in ${NA_LOGS:-*.log}; do
        set +f
        for _na_f in "$DIR"/$_na_g; do
            [ -f "$_na_f" ] && { echo "--- $_na_f"; tail -n "${NA_TAIL:-30}" "$_na_f"; }
        done
        set -f
    done
    set +f
    exit 1
}

# na_wait_line FILE PATTERN SECONDS: 0 once FILE has a line matching
# PATTERN, 1 when SECONDS passed first.
# na_wait_file DIR GLOB SECONDS: print the first file of DIR matching GLOB
# once there is one (a run's node log: nearattn-run-CLUSTER-NODE-PID.log);
# prints DIR/GLOB itself when SECONDS passed first
na_wait_file() {
    _na_w=$(($3 * 10 * NA_TS))
    while [ $_na_w -gt 0 ]; do
        for _na_f in "$1"/$2; do
            [ -e "$_na_f" ] && { echo "$_na_f"; return 0; }
        done
        sleep 0.1
        _na_w=$((_na_w - 1))
    done
    echo "$1/$2"
    return 1
}
na_wait_line() {
    na_wait_all "$3" "$2" "$1"
}
# na_wait_all SECONDS PATTERN FILE...: 0 once every FILE has a line matching
# PATTERN, 1 when SECONDS passed first.
na_wait_all() {
    _na_w=$(($1 * 10 * NA_TS))
    _na_pat=$2
    shift 2
    while :; do
        _na_all=1
        for _na_f in "$@"; do
            grep -q "$_na_pat" "$_na_f" 2>/dev/null || _na_all=0
        done
        [ "$_na_all" = 1 ] && return 0
        [ "$_na_w" -le 0 ] && return 1
        sleep 0.1
        _na_w=$((_na_w - 1))
    done
}

# na_wait_count SECONDS N PATTERN GLOB: 0 once the files GLOB (a pattern under
# DIR, expanded at each look: files may appear meanwhile) hold N lines matching
# PATTERN in all, 1 when SECONDS passed first.
na_wait_count() {
    _na_w=$(($1 * 10 * NA_TS))
    while [ "$(cat "$DIR"/$4 2>/dev/null | grep -c "$3")" -lt "$2" ]; do
        [ "$_na_w" -le 0 ] && return 1
        sleep 0.1
        _na_w=$((_na_w - 1))
    done
}

# na_same_sorted A B: 0 when files A and B hold the same lines in any order
# (sorted copies A.s, B.s); otherwise their diff (first 40 lines) and 1.
na_same_sorted() {
    sort "$1" > "$1.s"
    sort "$2" > "$2.s"
    cmp -s "$1.s" "$2.s" && return 0
    diff "$1.s" "$2.s" | head -n 40
    return 1
}

# na_vs_mono NAME WHAT MODEL TOK N ARGS...: a greedy `BIN run --mode
# monolithic` of DIR/prompts.txt (N new tokens) on MODEL / TOK into
# DIR/NAME.mono, then `BIN run ARGS...` of the same prompts (120 s at most)
# into DIR/NAME.off, its stderr in DIR/NAME.err; fail (naming WHAT) unless
# both succeed and print the same lines in any order.
na_vs_mono() {
    _na_vn=$1
    _na_what=$2
    _na_k=$5
    "$BIN" run --mode monolithic --model "$3" --tokenizer "$4" --prompts "$DIR/prompts.txt" \
        -n "$_na_k" --temp 0 --threads 1 > "$DIR/$_na_vn.mono" 2> "$DIR/$_na_vn.mono.err" ||
        fail "$_na_vn: monolithic run failed"
    shift 5
    na_fg "$DIR/$_na_vn.off" "$DIR/$_na_vn.err" timeout $((120 * NA_TS)) "$BIN" run "$@" \
        --prompts "$DIR/prompts.txt" -n "$_na_k" --temp 0 --threads 1 ||
        fail "$_na_vn: $_na_what run failed"
    na_same_sorted "$DIR/$_na_vn.mono" "$DIR/$_na_vn.off" ||
        fail "$_na_vn: $_na_what text differs from monolithic"
}

# na_start NAME CMD...: na_spawn CMD with its log in DIR/NAME.log; its pid in
# PID_NAME.
na_start() {
    _na_sn=$1
    shift
    na_spawn "$DIR/$_na_sn.log" "$@"
    eval "PID_$_na_sn=$NA_PID"
}

# na_node_layout PARTITION: DIR/layout.yaml from tests/data/node/node.yaml.in
# (ports PORT0 and PORT1, the KV under DIR/kv, tls ${TLS:-auto}).
na_node_layout() {
    sed -e "s|@PORT0@|$PORT0|" -e "s|@PORT1@|$PORT1|" -e "s|@KV@|$DIR/kv|" \
        -e "s|@SHARED@|$SHARED|" -e "s|@SECRET@|$SRC/cluster-configs/dev.secret|" \
        -e "s|@PARTITION@|$1|" -e "s|tls: auto|tls: ${TLS:-auto}|" \
        -e "s|peer_timeout_ms: 1500|peer_timeout_ms: $((1500 * NA_TS))|" \
        "$SRC/tests/data/node/node.yaml.in" >"$DIR/layout.yaml"
}

# na_stories: STORIES and STOK, the shared stories260K model and tokenizer
# (after na_test_init); exit 77 (skipped) when they are absent.
na_stories() {
    STORIES="$SHARED/models/stories260K.bin"
    STOK="$SHARED/models/tok512.bin"
    [ -f "$STORIES" ] || { echo "SKIPPED: no $STORIES"; exit 77; }
}

# na_layout_head NAME MODEL_EXTRA TRANSPORT: the cluster, model (stories260K,
# after na_stories; MODEL_EXTRA e.g. ", kv_dtype: f32") and transport lines
# of a test layout.
na_layout_head() {
    echo "cluster: { name: $1, secret_file: \"$SRC/cluster-configs/dev.secret\" }"
    echo "model: { path: \"$STORIES\", tokenizer: \"$STOK\"$2 }"
    echo "transport: { $3 }"
}

# na_cluster_test NAME N_PORTS LOGS: na_test_init NAME, TMPDIR set to DIR (the
# logs of the nodes `run` starts land there), NA_LOGS=LOGS, the stories260K
# model (na_stories) and PORT, the first of N_PORTS free ports.
na_cluster_test() {
    na_test_init "$1"
    export TMPDIR="$DIR"
    NA_LOGS=$3
    na_stories
    PORT=$(na_free_ports "$2") || fail "no free ports"
}
