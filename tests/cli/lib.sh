# tests/cli/lib.sh — the start the CLI test scripts share (sourced by
# tests/cli/test_*.sh as . "$(dirname "$0")/lib.sh").
# na_cli_init NAME: BIN, the nearattn binary (NA_BIN, set by ctest; the
# script stops when it is not set); TMP, a fresh temporary directory named
# after NAME, removed at exit; FAILS=0.
# fail MSG...: "FAIL: MSG" on stderr, counted in FAILS; the script goes on and
# its end exits non-zero when FAILS is not 0.
# usage_err PATTERN ARGS...: `nearattn ARGS` is a usage error: exit 2, and its
# stderr matches the extended regular expression PATTERN (a fail otherwise).
na_cli_init() {
    BIN=${NA_BIN:?NA_BIN is not set}
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1-XXXXXX") || exit 1
    trap 'rm -rf "$TMP"' EXIT
    FAILS=0
}
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
usage_err() {
    pat=$1
    shift
    "$BIN" "$@" > /dev/null 2> "$TMP/usage.err" < /dev/null
    rc=$?
    [ $rc = 2 ] || fail "$*: exit $rc, not 2 (a usage error): $(cat "$TMP/usage.err")"
    grep -Eq -- "$pat" "$TMP/usage.err" || fail "$*: '$(cat "$TMP/usage.err")' !~ '$pat'"
}
