#!/bin/sh
# tests/serve/test_bench_serve_llama.sh — `nearattn bench serve --peer URL`
# against llama.cpp's llama-server on the same GGUF file: a small generated
# model (gen-model, vocabulary embedded), llama-server started on a free port
# with as many slots as the concurrency, then serve (monolithic) and the
# peer driven alternately at concurrency 1 and 2; every row beside the peer
# has both figures and no request failed. llama.cpp is built outside this
# repository: the peer is $NA_LLAMA_SERVER, else llama-server on PATH.
# Exit 0 pass, 1 fail, 77 skipped (no llama-server, no jq).
set -u
. "$(dirname "$0")/../cluster/proc.sh"
na_test_init na_bench_serve_llama
export TMPDIR="$DIR"
NA_LOGS="*.err nearattn-bench-serve-*/*.log"
LS=${NA_LLAMA_SERVER:-$(command -v llama-server 2>/dev/null)}
[ -n "$LS" ] && [ -x "$LS" ] || { echo "SKIPPED: no llama-server (set NA_LLAMA_SERVER)"; exit 77; }
command -v jq >/dev/null 2>&1 || { echo "SKIPPED: no jq (scripts/deps.txt)"; exit 77; }

"$BIN" gen-model --out "$DIR/m" --dim 64 --hidden 172 --layers 2 --heads 4 --vocab 512 \
    --seq-len 256 --format gguf --dtype f16 --quiet || fail "gen-model failed"
PORT=$(na_free_port) || fail "no free port"
na_bg /dev/null "$DIR/llama.err" "$LS" -m "$DIR/m.gguf" -t 1 -np 2 -c 512 --host 127.0.0.1 \
    --port "$PORT"
LP=$NA_PID
na_fg "$DIR/bench.out" "$DIR/bench.err" timeout $((240 * NA_TS)) "$BIN" bench serve \
    --mode monolithic --config "$SRC/cluster-configs/local.yaml" --model "$DIR/m.gguf" \
    --peer "http://127.0.0.1:$PORT" --concurrency 1,2 --requests 4 --max-tokens 8 --no-run \
    --json "$DIR/bench.json" || fail "bench serve --peer llama-server failed"
cat "$DIR/bench.out"
for c in 1 2; do
    for m in throughput "ITL p50" "ITL p99" "TTFT p50"; do
        jq -e --arg n "c=$c serve vs peer $m" '[.results[] | select(.name == $n)][0] |
            .value > 0 and .reference_value > 0 and .ratio > 0' "$DIR/bench.json" >/dev/null ||
            fail "c=$c: no $m beside llama-server's"
    done
done
grep -q "requests.*failed" "$DIR/bench.out" && fail "requests failed"
kill -TERM "$LP"
wait "$LP"
echo "ok: bench serve --peer llama-server"
exit 0
