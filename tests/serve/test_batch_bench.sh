#!/bin/sh
# tests/serve/test_batch_bench.sh MODE — `nearattn bench serve --quick` smoke
# run (cli/bench_serve.c): it starts `nearattn serve` (MODE: monolithic, or
# offload with storage-node processes), drives it over HTTP at concurrency 1
# and 2 and runs `nearattn run` beside it; the JSON report has the
# throughput with the run reference, TTFT and ITL percentiles, no failed
# request, and the server is gone afterwards; with --api-key-file; then
# --url against a server started here (no run reference), and without the
# key (refused); then --peer: the same client against a second server (a
# monolithic `nearattn serve` with a key of its own), the rows beside the
# peer, the pairs alternated, and a peer that is not there or refuses the
# key is a clear failure; the CPU time per token of serve and of the peer
# (--peer-pid).
# Exit 0 pass, 1 fail, 77 skipped (no stories260K, no jq).
set -u
MODE=$1
. "$(dirname "$0")/../cluster/proc.sh"
na_test_init na_bench_serve_test
export TMPDIR="$DIR"
NA_LOGS="*.err nearattn-bench-serve-*/*.log"
na_stories
command -v jq >/dev/null 2>&1 || { echo "SKIPPED: no jq (scripts/deps.txt)"; exit 77; }

echo "bench-serve-test-key-$$" > "$DIR/key"
chmod 600 "$DIR/key"
na_fg "$DIR/bench.out" "$DIR/bench.err" timeout $((240 * NA_TS)) "$BIN" bench serve --quick --mode "$MODE" \
    --config "$SRC/cluster-configs/local.yaml" --concurrency 1,2 --requests 4 --max-tokens 8 \
    --api-key-file "$DIR/key" --json "$DIR/bench.json" || fail "bench serve failed"
cat "$DIR/bench.out"
jq -e '.bench == "serve"' "$DIR/bench.json" >/dev/null || fail "no serve report"
for c in 1 2; do
    jq -e --arg n "c=$c serve throughput" '[.results[] | select(.name == $n)][0] |
        .value > 0 and .reference_value > 0 and .ratio > 0' "$DIR/bench.json" >/dev/null ||
        fail "c=$c: no throughput beside nearattn run"
    for m in "TTFT p50" "TTFT p99" "ITL p50" "ITL p90"; do
        jq -e --arg n "c=$c $m" '[.results[] | select(.name == $n)][0].value > 0' \
            "$DIR/bench.json" >/dev/null || fail "c=$c: no $m"
    done
done
grep -q "requests failed" "$DIR/bench.out" && fail "requests failed"
na_alive "$NA_PID" && fail "a process of the bench (the server, its nodes) is left"
ls -d "$DIR"/nearattn-bench-serve-* >/dev/null 2>&1 && fail "bench serve left its directory"
# --url: a server started here (with the key), no run reference
na_bg /dev/null "$DIR/serve.err" "$BIN" serve --port 0 --mode "$MODE" \
    --config "$SRC/cluster-configs/local.yaml" --api-key-file "$DIR/key"
SP=$NA_PID
na_wait_line "$DIR/serve.err" "^READY http://" 60 || fail "serve not ready"
URL=$(sed -n 's/^READY \(http:[^ ]*\).*/\1/p' "$DIR/serve.err")
na_fg "$DIR/url.out" "$DIR/url.err" timeout $((120 * NA_TS)) "$BIN" bench serve --url "$URL" --no-run \
    --api-key-file "$DIR/key" --concurrency 2 --requests 2 --max-tokens 4 ||
    fail "bench serve --url failed"
grep -q "^c=2 serve throughput .* -  *-  *-$" "$DIR/url.out" ||
    fail "--url: no throughput row without a reference"
na_fg "$DIR/nokey.out" "$DIR/nokey.err" timeout $((60 * NA_TS)) "$BIN" bench serve --url "$URL" --no-run \
    --concurrency 1 --requests 1 --ready-timeout 5 && fail "--url without the key succeeded"
# --peer: a second server (monolithic, its own key) as the peer
echo "bench-serve-peer-key-$$" > "$DIR/pkey"
chmod 600 "$DIR/pkey"
na_bg /dev/null "$DIR/peer.err" "$BIN" serve --port 0 --mode monolithic \
    --config "$SRC/cluster-configs/local.yaml" --api-key-file "$DIR/pkey"
PP=$NA_PID
na_wait_line "$DIR/peer.err" "^READY http://" 60 || fail "the peer serve is not ready"
PURL=$(sed -n 's/^READY \(http:[^ ]*\).*/\1/p' "$DIR/peer.err")
na_fg "$DIR/peer.out" "$DIR/peer-bench.err" timeout $((180 * NA_TS)) "$BIN" bench serve \
    --mode "$MODE" --config "$SRC/cluster-configs/local.yaml" --no-run --api-key-file "$DIR/key" \
    --peer "$PURL" --peer-api-key-file "$DIR/pkey" --peer-pid "$PP" \
    --concurrency 1,2 --requests 3 --max-tokens 6 --json "$DIR/peer.json" ||
    fail "bench serve --peer failed"
cat "$DIR/peer.out"
# CPU time per token: serve's (started here) beside the peer's (--peer-pid);
# a few ticks at most here, so only their presence is checked
jq -e '[.results[] | select(.name == "c=2 serve CPU per token")][0] |
    .value >= 0 and .reference_name == "peer" and .reference_value >= 0' "$DIR/peer.json" \
    >/dev/null || fail "no CPU per token beside the peer's"
for c in 1 2; do
    jq -e --arg n "c=$c serve vs peer throughput" '[.results[] | select(.name == $n)][0] |
        .value > 0 and .reference_name == "peer" and .reference_value > 0 and .ratio > 0' \
        "$DIR/peer.json" >/dev/null || fail "c=$c: no throughput beside the peer's"
    for m in "ITL p50" "ITL p99" "TTFT p50"; do
        jq -e --arg n "c=$c serve vs peer $m" '[.results[] | select(.name == $n)][0] |
            .value > 0 and .reference_value > 0' "$DIR/peer.json" >/dev/null ||
            fail "c=$c: no $m beside the peer's"
    done
done
# two measurements of each per level (the default with --peer), alternated
grep -q "concurrency 1, 3 requests, serve then peer" "$DIR/peer-bench.err" &&
    grep -q "concurrency 1, 3 requests, peer then serve" "$DIR/peer-bench.err" ||
    fail "--peer: the pairs are not alternated"
grep -q "requests.*failed" "$DIR/peer.out" && fail "--peer: requests failed"
# the peer's key is its own: without it the peer names no model
na_fg "$DIR/pnokey.out" "$DIR/pnokey.err" timeout $((60 * NA_TS)) "$BIN" bench serve --url "$URL" \
    --no-run --api-key-file "$DIR/key" --peer "$PURL" --concurrency 1 --requests 1 \
    --ready-timeout 5 && fail "--peer without the peer's key succeeded"
grep -q "the peer: .*v1/models" "$DIR/pnokey.err" || fail "--peer without its key: unclear error"
kill -TERM "$PP"
wait "$PP" || fail "the peer serve did not stop cleanly"
# a peer that is not there: a clear error within --ready-timeout
na_fg "$DIR/pgone.out" "$DIR/pgone.err" timeout $((60 * NA_TS)) "$BIN" bench serve --url "$URL" \
    --no-run --api-key-file "$DIR/key" --peer "$PURL" --concurrency 1 --requests 1 \
    --ready-timeout 2 && fail "--peer to a stopped server succeeded"
grep -q "the peer: .*health" "$DIR/pgone.err" || fail "--peer to a stopped server: unclear error"
na_fg "$DIR/ppid.out" "$DIR/ppid.err" timeout $((60 * NA_TS)) "$BIN" bench serve --url "$URL" \
    --no-run --api-key-file "$DIR/key" --peer "$URL" --peer-pid "$PP" --concurrency 1 \
    --requests 1 && fail "--peer-pid of an ended process succeeded"
grep -q "peer-pid $PP: no such process" "$DIR/ppid.err" || fail "--peer-pid of an ended process: unclear error"
kill -TERM "$SP"
wait "$SP" || fail "serve did not stop cleanly"
echo "ok: bench serve ($MODE)"
exit 0
