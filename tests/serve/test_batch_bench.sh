#!/bin/sh
# tests/serve/test_batch_bench.sh MODE — `nearattn bench serve --quick` smoke
# run (cli/bench_serve.c): it starts `nearattn serve` (MODE: monolithic, or
# offload with storage-node processes), drives it over HTTP at concurrency 1
# and 2 and runs `nearattn run` beside it; the JSON report has the
# throughput with the run reference, TTFT and ITL percentiles, no failed
# request, and the server is gone afterwards.
# Exit 0 pass, 1 fail, 77 skipped (no stories260K, no jq).
set -u
MODE=$1
. "$(dirname "$0")/../cluster/proc.sh"
na_test_init na_bench_serve_test
export TMPDIR="$DIR"
NA_LOGS="*.err nearattn-bench-serve-*/*.log"
na_stories
command -v jq >/dev/null 2>&1 || { echo "SKIPPED: no jq (scripts/deps.txt)"; exit 77; }

na_fg "$DIR/bench.out" "$DIR/bench.err" timeout 240 "$BIN" bench serve --quick --mode "$MODE" \
    --config "$SRC/cluster-configs/local.yaml" --concurrency 1,2 --requests 4 --max-tokens 8 \
    --json "$DIR/bench.json" || fail "bench serve failed"
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
echo "ok: bench serve ($MODE)"
exit 0
