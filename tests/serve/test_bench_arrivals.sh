#!/bin/sh
# tests/serve/test_bench_arrivals.sh PEER — `nearattn bench arrivals`
# (cli/bench_arrivals.c), a tiny version of issue 21's Arrivals row: a small
# generated GGUF model (context 2048), 4 streams decoding, a 600-token prompt
# arriving, on the `nearattn serve` the bench starts (monolithic) and on a
# peer driven by the same client, alternated:
#   PEER=serve  a second `nearattn serve` (monolithic, a key of its own);
#               also: its prefix cache hit no token (every newcomer prompt
#               starts with tokens of its own), streams that end before the
#               window closes and a peer that is not there are clear failures
#   PEER=llama  llama.cpp's llama-server on the same file ($NA_LLAMA_SERVER,
#               else llama-server on PATH; skipped without it: llama.cpp is
#               built outside this repository)
# Every row has its figure (the steady and arrival ITL p50/p99, the prefill
# alone, the newcomer's TTFT beside 1.3 x it, the arrival p99 beside 2 x the
# steady p99), both servers counted the 600 prompt tokens, and the window
# held gaps of the streams.
# Exit 0 pass, 1 fail, 77 skipped (no llama-server, no jq).
set -u
PEER=$1
. "$(dirname "$0")/../cluster/proc.sh"
na_test_init na_bench_arrivals
export TMPDIR="$DIR"
NA_LOGS="*.err nearattn-bench-arrivals-*/*.log"
command -v jq >/dev/null 2>&1 || { echo "SKIPPED: no jq (scripts/deps.txt)"; exit 77; }
if [ "$PEER" = llama ]; then
    LS=${NA_LLAMA_SERVER:-$(command -v llama-server 2>/dev/null)}
    [ -n "$LS" ] && [ -x "$LS" ] || { echo "SKIPPED: no llama-server (set NA_LLAMA_SERVER)"; exit 77; }
fi

"$BIN" gen-model --out "$DIR/m" --dim 64 --hidden 172 --layers 2 --heads 4 --vocab 4096 \
    --seq-len 2048 --format gguf --dtype f16 --quiet || fail "gen-model failed"
if [ "$PEER" = llama ]; then
    PORT=$(na_free_port) || fail "no free port"
    # 4 streams + the newcomer, 2048 tokens of context each
    na_bg /dev/null "$DIR/peer.err" "$LS" -m "$DIR/m.gguf" -t 1 -np 5 -c 10240 \
        --host 127.0.0.1 --port "$PORT"
    PP=$NA_PID
    PURL="http://127.0.0.1:$PORT"
    PKEY=""
else
    echo "arrivals-peer-key-$$" > "$DIR/pkey"
    chmod 600 "$DIR/pkey"
    na_bg /dev/null "$DIR/peer.err" "$BIN" serve --port 0 --mode monolithic \
        --config "$SRC/cluster-configs/local.yaml" --model "$DIR/m.gguf" --threads 1 \
        --api-key-file "$DIR/pkey"
    PP=$NA_PID
    na_wait_line "$DIR/peer.err" "^READY http://" 60 || fail "the peer serve is not ready"
    PURL=$(sed -n 's/^READY \(http:[^ ]*\).*/\1/p' "$DIR/peer.err")
    PKEY="--peer-api-key-file $DIR/pkey"
fi
# shellcheck disable=SC2086 # PKEY: no option or two words
na_fg "$DIR/bench.out" "$DIR/bench.err" timeout $((300 * NA_TS)) "$BIN" bench arrivals --quick \
    --config "$SRC/cluster-configs/local.yaml" --model "$DIR/m.gguf" --threads 1 \
    --peer "$PURL" $PKEY --streams 4 --prompt-tokens 600 --max-tokens 1400 --steady 1 \
    --steady-chunks 4 --reps 2 --json "$DIR/bench.json" --gaps "$DIR/gaps.txt" ||
    fail "bench arrivals failed"
cat "$DIR/bench.out"
jq -e '.bench == "arrivals"' "$DIR/bench.json" >/dev/null || fail "no arrivals report"
for s in serve peer; do
    for m in "steady ITL p50" "steady ITL p99" "arrival ITL p50" "prefill alone"; do
        jq -e --arg n "$s $m" '[.results[] | select(.name == $n)][0].value > 0' \
            "$DIR/bench.json" >/dev/null || fail "$s: no $m"
    done
    jq -e --arg n "$s arrival ITL p99" '[.results[] | select(.name == $n)][0] |
        .value > 0 and .reference_value > 0 and .ratio > 0' "$DIR/bench.json" >/dev/null ||
        fail "$s: no arrival ITL p99 beside 2 x the steady p99"
    jq -e --arg n "$s newcomer TTFT" '[.results[] | select(.name == $n)][0] |
        .value > 0 and .reference_value > 0 and .ratio > 0' "$DIR/bench.json" >/dev/null ||
        fail "$s: no newcomer TTFT beside 1.3 x its prefill alone"
    # the prompt went in as 600 token ids (a server may count a BOS it adds)
    grep -Eq "^$s: arrival ITL p99 / steady p99 = [0-9.]+ \(target <= 2: (met|missed)\).* [1-9][0-9]* arrival gaps; newcomer prompt 60[01] tokens" \
        "$DIR/bench.out" || fail "$s: no summary with the arrival gaps and the 600 prompt tokens"
done
grep -q "alternated with serve" "$DIR/bench.out" || fail "no peer note"
# --gaps: every gap of the summaries, each window's of each server and rep
for s in serve peer; do
    for w in steady arrival; do
        n=$(grep -c "^$s [12] $w [0-9]" "$DIR/gaps.txt")
        grep -q "^$s: .* \([0-9]*\) steady and \([0-9]*\) arrival gaps" "$DIR/bench.out" || fail "$s: no gap counts"
        want=$(sed -n "s/^$s: .* \([0-9]*\) steady and \([0-9]*\) arrival gaps.*/\1 \2/p" "$DIR/bench.out")
        [ "$w" = steady ] && want=${want% *} || want=${want#* }
        [ "$n" = "$want" ] || fail "--gaps: $n $s $w gaps written, the summary says $want"
    done
    grep -q "^$s 2 arrival " "$DIR/gaps.txt" || fail "--gaps: no arrival gap of $s's second rep"
done
grep -q "peer rep 2: prefill alone" "$DIR/bench.err" &&
    [ "$(grep -n "rep 2: prefill alone" "$DIR/bench.err" | head -1 | grep -c peer)" = 1 ] ||
    fail "the reps are not alternated (the peer first in the second)"
ls -d "$DIR"/nearattn-bench-arrivals-* >/dev/null 2>&1 && fail "bench arrivals left its directory"
if [ "$PEER" = serve ]; then
    # no newcomer found a cached prefix: its prompt starts with tokens of its own
    HIT=$(curl -s -H "Authorization: Bearer $(cat "$DIR/pkey")" "$PURL/metrics" |
          sed -n 's/^nearattn_prefix_tokens_total{node="all",kind="hit"} //p')
    [ -n "$HIT" ] || fail "the peer's /metrics has no prefix hit counter"
    [ "$HIT" = 0 ] || fail "the peer's prefix cache hit $HIT tokens of the newcomer prompts"
    # streams that stop before the steady window: a clear failure
    na_fg "$DIR/short.out" "$DIR/short.err" timeout $((120 * NA_TS)) "$BIN" bench arrivals --quick \
        --url "$PURL" --api-key-file "$DIR/pkey" --streams 2 --prompt-tokens 64 --max-tokens 3 \
        && fail "streams of 3 tokens passed"
    grep -q "stream [0-9] ended .*--max-tokens" "$DIR/short.err" ||
        fail "streams that end early: unclear error"
    kill -TERM "$PP"
    wait "$PP" || fail "the peer serve did not stop cleanly"
    na_fg "$DIR/gone.out" "$DIR/gone.err" timeout $((60 * NA_TS)) "$BIN" bench arrivals --quick \
        --url "$PURL" --ready-timeout 2 && fail "a server that is not there passed"
    grep -q "health" "$DIR/gone.err" || fail "a server that is not there: unclear error"
else
    kill -TERM "$PP"
    wait "$PP"
fi
echo "ok: bench arrivals (peer $PEER)"
exit 0
