#!/usr/bin/env python3
"""tests/cluster/raw_peer.py — raw-socket attacks on a node's front door
(rdma/xp_door.c), for tests/cluster/test_frontdoor.sh.

  raw_peer.py zeros  HOST PORT     64 zero bytes, then wait for the close
  raw_peer.py random HOST PORT     4 KiB of random bytes, then wait for the close
  raw_peer.py hugelen HOST PORT    a wire header (HELLO) claiming a payload of 2^64-1
  raw_peer.py half HOST PORT       half a HELLO header, then silence until closed
  raw_peer.py flood HOST PORT N S [SRC,...]
                                   N connections opened and held S seconds
                                   (idle), from the source addresses in turn
  raw_peer.py rogue HOST PORT S    listen on HOST:PORT for S seconds and answer
                                   every connection with garbage (a rogue node)
  raw_peer.py cut HOST PORT NODEPORT STAGE MS N
                                   a proxy on HOST:PORT to a real node on
                                   HOST:NODEPORT that cuts both sockets of each of
                                   N connections MS ms after it forwarded the
                                   node's HELLO_CHALLENGE (STAGE challenge) or
                                   its ADDR frame (STAGE addr): a handshake that
                                   fails half-way, after the UCX addresses;
                                   STAGE stop:PID sends SIGSTOP to PID (the
                                   node) the moment its ADDR frame went through
                                   (its UCX worker never answers the wireup)

  raw_peer.py tamper HOST PORT NODEPORT DIR SECONDS
                                   a relay on HOST:PORT to a real node on
                                   HOST:NODEPORT (connections one after the
                                   other, for SECONDS) that rewrites bytes of
                                   the ADDR frame ("NAXA") going DIR (c2s: to
                                   the node, s2c: from it): 8 bytes at offsets
                                   16 and 48 of the frame are inverted (in
                                   wire major 1 the first bytes of the UCX
                                   address, version included)
  raw_peer.py hold HOST PORT N SECONDS SRC[,SRC...]
                                   N half-open handshakes (half a HELLO
                                   header, then silence) from each source
                                   address SRC (127.0.0.2 ...: any 127/8
                                   address is local), each reopened at once
                                   when the node closes it, for SECONDS;
                                   prints "HOLD opened=<n>" every second

Prints one line "CLOSED <mode> after <seconds>" when the node closed the
connection (zeros/random/hugelen/half), "FLOOD opened=<n> closed_by_node=<m>",
or "ROGUE served=<n>". Exit 0 unless the socket calls themselves fail.
"""
import os
import socket
import struct
import sys
import time


def wire_header(msg_type, payload_len):
    # common/wire.h: magic, ver major/minor, type, flags, hdr_len, rsvd, payload_len...
    return (b"NATN" + struct.pack("<HHHHHH", 2, 0, msg_type, 0, 64, 0) +
            struct.pack("<Q", payload_len) + bytes(40))


def wait_closed(s, limit):
    """Seconds until the peer closed s (EOF or reset); -1 if not within limit."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - t0 < limit:
        try:
            b = s.recv(65536)
            if not b:
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return -1


def one_shot(mode, host, port):
    s = socket.create_connection((host, port), timeout=5)
    if mode == "zeros":
        s.sendall(bytes(64))
    elif mode == "random":
        s.sendall(os.urandom(4096))
    elif mode == "hugelen":
        s.sendall(wire_header(1, 2**64 - 1))
    elif mode == "half":
        s.sendall(wire_header(1, 168)[:32])
    t = wait_closed(s, 10)
    s.close()
    print("CLOSED %s after %.2f" % (mode, t) if t >= 0 else "OPEN %s after 10 s" % mode)
    sys.stdout.flush()


def flood(host, port, n, hold, srcs=None):
    socks = []
    for i in range(n):
        try:
            src = (srcs[i % len(srcs)], 0) if srcs else None
            socks.append(socket.create_connection((host, port), timeout=5, source_address=src))
        except OSError as e:
            print("connect failed after %d: %s" % (len(socks), e))
            break
    print("OPENED %d" % len(socks))
    sys.stdout.flush()
    time.sleep(hold)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    print("FLOOD opened=%d closed_by_node=%d" % (len(socks), closed))


def rogue(host, port, seconds):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(64)
    ls.settimeout(0.2)
    print("ROGUE listening on %s:%d" % (host, port))
    sys.stdout.flush()
    served = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        served += 1
        try:
            # alternate: zeros, random, a header with a huge length, a valid
            # looking CHALLENGE header with a truncated payload
            kind = served % 4
            if kind == 0:
                c.sendall(bytes(64))
            elif kind == 1:
                c.sendall(os.urandom(4096))
            elif kind == 2:
                c.sendall(wire_header(2, 2**64 - 1))
            else:
                c.sendall(wire_header(2, 200) + os.urandom(50))
            time.sleep(0.05)
        except OSError:
            pass
        c.close()
    print("ROGUE served=%d" % served)


def close_both(*socks):
    """Shut down and close each socket (one already gone is fine)."""
    for x in socks:
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        x.close()


def cut(host, port, node_port, stage, ms, n):
    import select
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(8)
    print("CUT listening", flush=True)
    for _ in range(n):
        c, _a = ls.accept()
        u = socket.create_connection((host, node_port))
        due = None
        while due is None or time.monotonic() < due:
            r, _w, _x = select.select([c, u], [], [], 0.01)
            if c in r:
                b = c.recv(65536)
                if not b:
                    break
                u.sendall(b)
            if u in r:
                b = u.recv(65536)
                if not b:
                    break
                c.sendall(b)
                if due is None and (stage == "challenge" or b"NAXA" in b):
                    due = time.monotonic() + ms / 1000.0
                    if stage.startswith("stop:"):
                        os.kill(int(stage[5:]), 19)     # SIGSTOP
        close_both(c, u)
    print("CUT done", flush=True)


def tamper(host, port, node_port, direction, seconds):
    import select
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(8)
    ls.settimeout(0.2)
    print("TAMPER listening", flush=True)
    t0 = time.monotonic()
    rewritten = 0
    while time.monotonic() - t0 < seconds:
        try:
            c, _a = ls.accept()
        except socket.timeout:
            continue
        u = socket.create_connection((host, node_port))
        # per direction: bytes forwarded, last 3 bytes (a magic split between
        # two reads), where the ADDR frame starts (None until seen)
        st = {c: [0, b"", None], u: [0, b"", None]}
        src_of_dir = c if direction == "c2s" else u
        while time.monotonic() - t0 < seconds:
            r, _w, _x = select.select([c, u], [], [], 0.05)
            done = False
            for x in r:
                try:
                    b = bytearray(x.recv(65536))
                except OSError:
                    b = b""
                if not b:
                    done = True
                    break
                s = st[x]
                if x is src_of_dir:
                    if s[2] is None:
                        i = (s[1] + bytes(b)).find(b"NAXA")
                        if i >= 0:
                            s[2] = s[0] - len(s[1]) + i
                    if s[2] is not None:
                        for off in (16, 48):
                            for k in range(8):
                                j = s[2] + off + k - s[0]
                                if 0 <= j < len(b):
                                    b[j] ^= 0xFF
                                    rewritten += 1
                s[0] += len(b)
                s[1] = (s[1] + bytes(b))[-3:]
                (u if x is c else c).sendall(bytes(b))
            if done:
                break
        close_both(c, u)
    print("TAMPER rewritten=%d" % rewritten, flush=True)


def hold(host, port, n, seconds, srcs):
    import select
    t0 = time.monotonic()
    socks = {src: [] for src in srcs}
    opened = 0
    last = t0
    while time.monotonic() - t0 < seconds:
        for src in srcs:
            lst = socks[src]
            while len(lst) < n:
                try:
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.bind((src, 0))
                    s.settimeout(2)
                    s.connect((host, port))
                    s.sendall(wire_header(1, 168)[:32])
                    lst.append(s)
                    opened += 1
                except OSError:
                    s.close()
                    break
        every = [s for lst in socks.values() for s in lst]
        r, _w, _x = select.select(every, [], [], 0.02) if every else ([], [], [])
        for s in r:
            try:
                b = s.recv(4096)
            except OSError:
                b = b""
            if not b:
                for lst in socks.values():
                    if s in lst:
                        lst.remove(s)
                s.close()
        if time.monotonic() - last >= 1:
            last = time.monotonic()
            print("HOLD opened=%d" % opened, flush=True)
    for lst in socks.values():
        for s in lst:
            s.close()
    print("HOLD opened=%d done" % opened, flush=True)


def main():
    mode = sys.argv[1]
    host, port = sys.argv[2], int(sys.argv[3])
    if mode in ("zeros", "random", "hugelen", "half"):
        one_shot(mode, host, port)
    elif mode == "flood":
        flood(host, port, int(sys.argv[4]), float(sys.argv[5]),
              sys.argv[6].split(",") if len(sys.argv) > 6 else None)
    elif mode == "rogue":
        rogue(host, port, float(sys.argv[4]))
    elif mode == "cut":
        cut(host, port, int(sys.argv[4]), sys.argv[5], float(sys.argv[6]), int(sys.argv[7]))
    elif mode == "tamper":
        tamper(host, port, int(sys.argv[4]), sys.argv[5], float(sys.argv[6]))
    elif mode == "hold":
        hold(host, port, int(sys.argv[4]), float(sys.argv[5]), sys.argv[6].split(","))
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
