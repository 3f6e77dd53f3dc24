#!/usr/bin/env python3
"""A stranger at a boot's re-attach port (crates/dpm/tests/boot_reform_guard.rs).

    reattach_intruder.py HOST:PORT NODE HOST_CLAIMED PROTOCOL MODE...

Each MODE runs on a connection of its own, all at once, claiming to be the
daemon of node NODE on HOST_CLAIMED (PROTOCOL 0: learn it from the
server's hello first). Per mode, one line:

    MODE got=BYTES closed_after=SECONDS verdict=accepted|refused|none

BYTES: what the server sent; closed_after: until the server closed (or 60
when it never did); verdict: the server's answer to our proof, if any.
Modes: silent (connects, says nothing), drip (a hello one byte a second),
huge (a 4 GiB length), garbage (a frame that is no JSON), noproof (a hello,
then closes), wrong (a random proof), reflect (the server's own proof sent
back), replay (a proof the server made on an earlier connection, with the
same nonce of ours), flood (300 connections one after another, each a
hello then waiting for the close; got and closed_after are their sums).
"""
import json
import os
import select
import socket
import struct
import sys
import threading
import time

addr, node, claimed, protocol = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
host, port = addr.rsplit(":", 1)
host = host.strip("[]")
port = int(port)
LIMIT = 60.0


class Conn:
    def __init__(self):
        self.s = socket.create_connection((host, port))
        self.got = 0
        self.start = time.monotonic()

    def send(self, data):
        try:
            self.s.sendall(data)
            return True
        except OSError:
            return False

    def frame(self, obj):
        body = json.dumps(obj).encode()
        return self.send(struct.pack(">I", len(body)) + body)

    def readn(self, n):
        buf = b""
        while len(buf) < n:
            left = LIMIT - (time.monotonic() - self.start)
            r, _, _ = select.select([self.s], [], [], max(left, 0))
            if not r:
                return None
            try:
                chunk = self.s.recv(n - len(buf))
            except OSError:
                return None
            if not chunk:
                return None
            self.got += len(chunk)
            buf += chunk
        return buf

    def read(self):
        head = self.readn(4)
        if head is None:
            return None
        body = self.readn(struct.unpack(">I", head)[0])
        return None if body is None else json.loads(body)

    def closed_after(self):
        """Read until the server closes; seconds since connecting."""
        while True:
            left = LIMIT - (time.monotonic() - self.start)
            r, _, _ = select.select([self.s], [], [], max(left, 0))
            if not r:
                return LIMIT
            try:
                chunk = self.s.recv(4096)
            except OSError:
                chunk = b""
            if not chunk:
                return time.monotonic() - self.start
            self.got += len(chunk)


def hello(proto):
    return {"protocol": proto, "role": "Daemon", "node": node, "host": claimed}


def learn_protocol():
    c = Conn()
    c.frame(hello(0))
    theirs = c.read()
    c.s.close()
    return theirs["protocol"] if theirs else 0


def handshake(c, nonce, proof_for):
    """Hello, challenge; then the proof `proof_for(server's proof)`; the verdict."""
    c.frame(hello(protocol))
    if c.read() is None:
        return "none", None
    if not c.frame({"Challenge": {"nonce": nonce.hex()}}):
        return "none", None
    theirs = c.read()  # the server's challenge
    if theirs is None:
        return "none", None
    server_proof = c.read()
    if server_proof is None or "Proof" not in server_proof:
        return "none", None
    mac = server_proof["Proof"]["mac"]
    c.frame({"Proof": {"mac": proof_for(mac)}})
    verdict = c.read()
    if verdict is None or "Verdict" not in verdict:
        return "none", mac
    return ("accepted" if verdict["Verdict"]["accepted"] else "refused"), mac


captured = {}


def run(mode):
    c = Conn()
    verdict = "none"
    if mode == "silent":
        pass
    elif mode == "drip":
        body = json.dumps(hello(protocol)).encode()
        for byte in struct.pack(">I", len(body)) + body:
            if not c.send(bytes([byte])):
                break
            r, _, _ = select.select([c.s], [], [], 1.0)
            if r:
                break
    elif mode == "huge":
        c.send(struct.pack(">I", 0xFFFFFFFF) + b"x" * 4096)
    elif mode == "garbage":
        c.send(struct.pack(">I", 24) + b"\x00\xffnot json at all\x01\x02\x03\x04\x05\x06")
    elif mode == "noproof":
        c.frame(hello(protocol))
        c.read()
        try:
            c.s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    elif mode == "wrong":
        verdict, _ = handshake(c, os.urandom(32), lambda _mac: os.urandom(32).hex())
    elif mode == "reflect":
        verdict, _ = handshake(c, os.urandom(32), lambda mac: mac)
    elif mode == "flood":
        got, took = 0, 0.0
        for _ in range(300):
            one = Conn()
            one.frame(hello(protocol))
            took += one.closed_after()
            got += one.got
            one.s.close()
        c.got += got
        c.start -= took
    elif mode == "replay":
        nonce = os.urandom(32)
        first = Conn()
        _, mac = handshake(first, nonce, lambda _mac: os.urandom(32).hex())
        first.s.close()
        verdict, _ = handshake(c, nonce, lambda _mac: mac or "00" * 32)
    closed = c.closed_after()
    results.append(f"{mode} got={c.got} closed_after={closed:.1f} verdict={verdict}")


results = []


if protocol == 0:
    protocol = learn_protocol()
    print(f"protocol {protocol}", flush=True)
threads = [threading.Thread(target=run, args=(m,)) for m in sys.argv[5:]]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("\n".join(sorted(results)), flush=True)
