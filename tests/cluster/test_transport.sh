#!/bin/sh
# tests/cluster/test_transport.sh PEER SCENARIO PORT
# (PORT is used by the mpirun scenario only, as the servers' base port; the
# others let the servers pick a free port)
# Real multi-process transport clusters built from tests/cluster/xp_peer.c.
#   pair-shm | pair-tcp     1 server + 1 client, decode (KiB) and prefill (MiB) echoes
#                           (*-shm: the transport's default errmode for tls shm is
#                           cm, so UCX 1.13 really uses posix/sysv shared memory;
#                           the UCX lanes printed by the peers are checked:
#                           docs/transport.md)
#   trio-shm | trio-tcp     2 servers + 1 client talking to both at once
#   mpirun                  the trio under `mpirun -n 3` (rank from the environment)
#   kill-tcp | kill-shm     kill -9 of a client: the server reports the loss in time,
#                           keeps serving a client connected before the kill (5
#                           checked rounds after the loss) and serves the next
#                           client (kill-shm: over posix/sysv, errmode cm, checked
#                           from the lanes)
#   vanish-shm              kill -9 of the server under a busy client over shared
#                           memory (errmode cm: no UCX peer-failure report): the
#                           client learns it from the connection's TCP socket (EOF)
#                           well within the 3 s transport timeout
#   secret                  a client with the wrong secret is refused; server keeps serving
#   garbage                 a malformed message drops that peer only
#   badaddr                 a peer that holds the secret sends a garbage UCX worker
#                           address in its ADDR frame (8 bytes: an unknown address
#                           version, a V2 header, too short a V1 header, ones): the
#                           listener refuses each with a log line naming the
#                           address and keeps serving; a listener that sends one
#                           makes the connecting client fail, not abort (UCX 1.13
#                           asserts on an unknown address version, rc 134)
#   order-shm | order-tcp   bursts of mixed eager / rendezvous messages: answers keep
#                           the order sent (per-endpoint ordering)
#   busy                    a second listener on a taken port fails with "port taken";
#                           the first keeps serving
#   restart                 a server that dropped a peer itself (its side closed
#                           first: TIME_WAIT) is restarted on the same port at once
#                           and serves (SO_REUSEADDR on the transport's own listener)
#   netns                   server and client in two network namespaces joined by a
#                           veth, UCX_TLS=tcp (skipped, exit 77, when namespaces
#                           cannot be made)
# Exit 0 pass, 1 fail, 77 skipped.
set -u
PEER=$1
SCEN=$2
PORT=$3
NS_A="" NS_B=""
DECODE="2048,24576,196608"         # q/k/v rows (head_dim 128, 32 heads, f16) for batch 1 and 8
PREFILL="1048576,4194304,8388608"    # bulk KV of a prompt chunk
. "$(dirname "$0")/proc.sh"
na_tmpdir na_xp_test
# na_cleanup also deletes the network namespaces made here
NA_CLEANUP='[ -n "$NS_A" ] && ip netns del "$NS_A" 2>/dev/null
[ -n "$NS_B" ] && ip netns del "$NS_B" 2>/dev/null'
# port_of NAME: the port server NAME bound (its "READY name host:port" line);
# servers listen on port 0 so parallel and repeated runs never collide (a
# server that dropped a peer keeps its port in TIME_WAIT for a minute).
port_of() {
    na_wait_line "$DIR/$1.log" "^READY" 10 || fail "server $1 did not start"
    sed -n 's/^READY [^ ]* .*:\([0-9]*\)$/\1/p' "$DIR/$1.log" | head -n 1
}
# s0_tcp CLIENTS: server s0 over tcp on a free port for CLIENTS clients, its port in P0
s0_tcp() {
    na_start s0 "$PEER" server --name s0 --listen 127.0.0.1:0 --clients "$1" --tls tcp $COMMON
    P0=$(port_of s0)
}
# decode_tcp NAME ROUNDS: client NAME sends ROUNDS rounds of decode sizes to s0 (port P0)
# over tcp and must exit 0
decode_tcp() {
    na_start "$1" "$PEER" client --name "$1" --connect 127.0.0.1:$P0 --tls tcp --sizes "$DECODE" \
        --rounds "$2" $COMMON
    finish "$1"
}
# finish NAME: wait for NAME and require exit 0
finish() {
    eval "p=\$PID_$1"
    wait "$p"
    rc=$?
    [ "$rc" -eq 0 ] || fail "$1 exited $rc"
}

# the transport timeout grows with NA_TS (4 in the sanitizer build): a send
# under ASan on a loaded machine can take seconds; the checks that tell a
# socket's EOF from the timeout keep their own bounds
COMMON="--timeout-ms $((3000 * NA_TS)) --max-ms $((60000 * NA_TS))"
export XP_PEER_DESCRIBE=1          # peers print their UCX lanes (ucp_ep_print_info)
# lanes FILE shm|tcp: the endpoint printed in FILE carries active messages over
# shared memory (posix/sysv) or over tcp only
lanes() {
    grep -q "lane\[" "$1" || fail "$1: no UCX lane description"
    if [ "$2" = shm ]; then
        grep -Eq "lane\[[0-9]+\]: +[0-9]+:(posix|sysv)/.* am( |$)" "$1" ||
            fail "$1: active messages do not go over posix/sysv shared memory"
    else
        grep -Eq "(posix|sysv)/" "$1" && fail "$1: tcp run uses shared memory"
        grep -Eq "lane\[[0-9]+\]: +[0-9]+:tcp/.* am( |$)" "$1" ||
            fail "$1: active messages do not go over tcp"
    fi
}
case "$SCEN" in
pair-shm|pair-tcp)
    tls=${SCEN#pair-}
    na_start s0 "$PEER" server --name s0 --listen 127.0.0.1:0 --clients 1 --tls "$tls" $COMMON
    P0=$(port_of s0)
    na_start c0 "$PEER" client --name c0 --connect 127.0.0.1:$P0 --tls "$tls" \
        --sizes "$DECODE,$PREFILL" --rounds 3 $COMMON
    finish c0
    finish s0
    grep -q "served=18 " "$DIR/s0.log" || fail "server did not serve 18 echoes"
    lanes "$DIR/s0.log" "$tls"
    lanes "$DIR/c0.log" "$tls"
    ;;
trio-shm|trio-tcp)
    tls=${SCEN#trio-}
    na_start s0 "$PEER" server --name s0 --listen 127.0.0.1:0 --clients 1 --tls "$tls" $COMMON
    na_start s1 "$PEER" server --name s1 --listen 127.0.0.1:0 --clients 1 --tls "$tls" $COMMON
    P0=$(port_of s0)
    P1=$(port_of s1)
    na_start c0 "$PEER" client --name c0 --connect 127.0.0.1:$P0,127.0.0.1:$P1 \
        --tls "$tls" --sizes "$DECODE,$PREFILL" --rounds 2 $COMMON
    finish c0
    finish s0
    finish s1
    grep -q "servers=2" "$DIR/c0.log" || fail "client did not talk to both servers"
    ;;
mpirun)
    command -v mpirun >/dev/null 2>&1 || { echo "SKIPPED: no mpirun"; exit 77; }
    extra=""
    [ "$(id -u)" -eq 0 ] && extra="--allow-run-as-root"
    na_start mpi mpirun -n 3 $extra --oversubscribe "$PEER" mpi --base-port "$PORT" --tls tcp \
        --sizes "$DECODE,$PREFILL" --rounds 2 $COMMON
    finish mpi
    grep -q "OK rank0 .*servers=2" "$DIR/mpi.log" || fail "rank 0 did not finish with 2 servers"
    [ "$(grep -c '^SUMMARY rank' "$DIR/mpi.log")" -eq 2 ] || fail "servers did not both finish"
    ;;
kill-tcp|kill-shm)
    tls=${SCEN#kill-}
    na_start s0 "$PEER" server --name s0 --listen 127.0.0.1:0 --clients 3 --tls $tls $COMMON
    P0=$(port_of s0)
    # a peer connected before the kill, echoing all along; once $DIR/killed
    # exists it must complete 5 more checked rounds (served after the kill)
    na_start steady "$PEER" client --name steady --connect 127.0.0.1:$P0 --tls $tls \
        --sizes "$DECODE,1048576" --until-file "$DIR/killed" --rounds 5 $COMMON
    na_start victim "$PEER" client --name victim --connect 127.0.0.1:$P0 --tls $tls \
        --sizes 4096,1048576 --forever $COMMON
    na_wait_line "$DIR/s0.log" "ACCEPTED victim" 10 || fail "victim did not connect"
    na_wait_line "$DIR/s0.log" "ACCEPTED steady" 10 || fail "steady peer did not connect"
    sleep 0.3
    lanes "$DIR/s0.log" "$tls"
    kill -9 "$PID_victim"
    wait "$PID_victim" 2>/dev/null
    # the loss must be reported within the transport timeout (+ slack)
    na_wait_line "$DIR/s0.log" "LOST victim" 6 || fail "server did not report the lost peer in time"
    : >"$DIR/killed"
    finish steady
    grep -q "^UNTIL steady" "$DIR/steady.log" || fail "steady peer did not see the kill"
    grep -q "^OK steady" "$DIR/steady.log" ||
        fail "the peer connected before the kill was not served after it"
    grep -q "LOST steady" "$DIR/s0.log" && fail "the steady peer was lost too"
    na_start c1 "$PEER" client --name c1 --connect 127.0.0.1:$P0 --tls $tls \
        --sizes "$DECODE,$PREFILL" --rounds 2 $COMMON
    finish c1
    finish s0
    grep -q "lost=1" "$DIR/s0.log" || fail "summary does not count one loss"
    ;;
vanish-shm)
    na_start s0 "$PEER" server --name s0 --listen 127.0.0.1:0 --clients 1 --tls shm $COMMON
    P0=$(port_of s0)
    na_start c0 "$PEER" client --name c0 --connect 127.0.0.1:$P0 --tls shm --sizes 4096,1048576 \
        --forever $COMMON
    na_wait_line "$DIR/s0.log" "ACCEPTED c0" 10 || fail "c0 did not connect"
    sleep 0.3
    lanes "$DIR/s0.log" shm
    t0=$(date +%s%N)
    kill -9 "$PID_s0"
    wait "$PID_c0" && fail "c0 kept going after its server died"
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    echo "client saw the server vanish after $ms ms"
    [ "$ms" -lt 1500 ] || fail "the loss took $ms ms (the 3 s timeout, not the socket's EOF)"
    ;;
secret)
    na_start s0 "$PEER" server --name s0 --listen 127.0.0.1:0 --clients 1 --tls auto $COMMON
    P0=$(port_of s0)
    na_start bad "$PEER" client --name intruder --secret wrong-secret --connect 127.0.0.1:$P0 \
        --expect-refused $COMMON
    finish bad
    grep -q "REFUSED intruder: .*secret" "$DIR/bad.log" || fail "refusal does not name the secret"
    na_wait_line "$DIR/s0.log" "dropped peer 'intruder'" 5 || fail "server did not log the refusal"
    # an intruder that ignores the server's proof: the server's check refuses it
    na_start bad2 "$PEER" client --name intruder2 --secret wrong-secret --connect 127.0.0.1:$P0 \
        --expect-refused --skip-server-proof $COMMON
    finish bad2
    grep -q "REFUSED intruder2: .*refused by peer (auth)" "$DIR/bad2.log" ||
        fail "the server did not refuse the wrong proof"
    na_wait_line "$DIR/s0.log" "dropped peer 'intruder2'.*could not prove the cluster secret" 5 ||
        fail "server did not log its refusal"
    na_start c1 "$PEER" client --name c1 --connect 127.0.0.1:$P0 --sizes "$DECODE" --rounds 2 $COMMON
    finish c1
    finish s0
    ;;
garbage)
    s0_tcp 2
    na_start bad "$PEER" client --name junk --connect 127.0.0.1:$P0 --tls tcp --garbage $COMMON
    finish bad
    grep -q "DROPPED junk" "$DIR/s0.log" || fail "server did not drop the malformed peer"
    decode_tcp c1 2
    finish s0
    ;;
badaddr)
    s0_tcp 1
    i=0
    for a in 0e00000000000000 0100000000000000 0000000000000000 ffffffffffffffff 01020304; do
        i=$((i + 1))
        na_start "bad$i" "$PEER" client --name "junk$i" --connect 127.0.0.1:$P0 --tls tcp \
            --test-addr "$a" --expect-fail $COMMON --timeout-ms 1000
        finish "bad$i"
        kill -0 "$PID_s0" 2>/dev/null || fail "the listener died on address $a"
        na_wait_line "$DIR/s0.log" "dropped peer 'junk$i'.*UCX worker address" 5 ||
            fail "no log line for address $a: $(tail -n 3 "$DIR/s0.log")"
    done
    decode_tcp c1 2
    finish s0
    # the other direction: a listener holding the secret answers with garbage
    na_start s1 "$PEER" server --name s1 --listen 127.0.0.1:0 --clients 100 --tls tcp \
        --test-addr 0e00000000000000 --max-ms 20000 --timeout-ms 3000
    P1=$(port_of s1)
    na_start c2 "$PEER" client --name c2 --connect 127.0.0.1:$P1 --tls tcp --expect-fail $COMMON \
        --timeout-ms 1000
    finish c2
    grep -q "REFUSED c2: .*UCX worker address version" "$DIR/c2.log" ||
        fail "the client's failure does not name the address: $(cat "$DIR/c2.log")"
    kill "$PID_s1" 2>/dev/null
    ;;
order-shm|order-tcp)
    tls=${SCEN#order-}
    na_start s0 "$PEER" server --name s0 --listen 127.0.0.1:0 --clients 1 --tls "$tls" $COMMON
    P0=$(port_of s0)
    na_start c0 "$PEER" client --name c0 --connect 127.0.0.1:$P0 --tls "$tls" \
        --sizes "64,$DECODE,1048576,100,4194304" --burst 24 --rounds 3 $COMMON
    finish c0
    finish s0
    grep -q "served=72 " "$DIR/s0.log" || fail "server did not serve 72 echoes"
    ;;
busy)
    s0_tcp 1
    na_start s1 "$PEER" server --name s1 --listen 127.0.0.1:$P0 --clients 1 --tls tcp $COMMON
    eval "p=\$PID_s1"
    wait "$p" && fail "a second server could listen on the same port"
    grep -q "port taken" "$DIR/s1.log" || fail "no 'port taken' message"
    decode_tcp c0 1
    finish s0
    ;;
restart)
    na_start s0 "$PEER" server --name s0 --listen 127.0.0.1:$PORT --clients 1 --tls tcp $COMMON
    na_wait_line "$DIR/s0.log" "^READY" 10 || fail "server s0 did not start"
    na_start bad "$PEER" client --name junk --connect 127.0.0.1:$PORT --tls tcp --garbage $COMMON
    finish bad
    finish s0
    grep -q "DROPPED junk" "$DIR/s0.log" || fail "server did not drop the malformed peer"
    na_start s1 "$PEER" server --name s1 --listen 127.0.0.1:$PORT --clients 1 --tls tcp $COMMON
    na_wait_line "$DIR/s1.log" "^READY" 10 || fail "restarted server did not listen: $(cat "$DIR/s1.log")"
    na_start c1 "$PEER" client --name c1 --connect 127.0.0.1:$PORT --tls tcp --sizes "$DECODE" \
        --rounds 1 $COMMON
    finish c1
    finish s1
    ;;
netns)
    [ "$(id -u)" -eq 0 ] || { echo "SKIPPED: network namespaces need root"; exit 77; }
    tag=$(printf '%04x' $(($$ % 65536)))
    NS_A="naxp${tag}a"
    if ! ip netns add "$NS_A" 2>"$DIR/ns.err"; then
        NS_A=""
        echo "SKIPPED: cannot create a network namespace: $(cat "$DIR/ns.err")"
        exit 77
    fi
    NS_B="naxp${tag}b"
    ip netns add "$NS_B" || fail "second namespace"
    ip link add "vx${tag}a" netns "$NS_A" type veth peer name "vx${tag}b" netns "$NS_B" ||
        { echo "SKIPPED: cannot create a veth pair"; exit 77; }
    ip -n "$NS_A" addr add 10.213.0.1/24 dev "vx${tag}a" &&
    ip -n "$NS_B" addr add 10.213.0.2/24 dev "vx${tag}b" &&
    ip -n "$NS_A" link set "vx${tag}a" up && ip -n "$NS_B" link set "vx${tag}b" up &&
    ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up || fail "namespace network setup"
    # UCX lists a tcp device only once the link is up (carrier + address)
    n=0
    until ip -n "$NS_A" link show "vx${tag}a" | grep -q "state UP" &&
          ip -n "$NS_B" link show "vx${tag}b" | grep -q "state UP"; do
        n=$((n + 1))
        [ "$n" -lt 50 ] || fail "veth did not come up"
        sleep 0.1
    done
    na_start s0 ip netns exec "$NS_A" "$PEER" server --name s0 --listen 10.213.0.1:0 \
        --clients 1 --tls tcp $COMMON
    P0=$(port_of s0)
    na_start c0 ip netns exec "$NS_B" "$PEER" client --name c0 --connect 10.213.0.1:$P0 \
        --tls tcp --sizes "$DECODE,$PREFILL" --rounds 2 $COMMON
    finish c0
    finish s0
    grep -q "ACCEPTED c0" "$DIR/s0.log" || fail "no connection across the namespaces"
    ;;
*)
    echo "unknown scenario $SCEN"
    exit 2
    ;;
esac
echo "PASS: $SCEN"
exit 0
