#!/usr/bin/env python3
import os, socket, sys, time
s = socket.socket(fileno=int(os.environ["PMI_FD"]))
def ask(line, want):
    s.sendall((line + "\n").encode())
    got = b""
    while not got.endswith(b"\n"):
        part = s.recv(4096)
        if not part:
            sys.exit("the PMI connection closed")
        got += part
    if want not in got.decode():
        sys.exit("unexpected answer: " + got.decode())
rank = os.environ["PMI_RANK"]
ask("cmd=init pmi_version=1 pmi_subversion=1", "cmd=response_to_init")
print("rank %s ready" % rank, flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
ask("cmd=barrier_in", "cmd=barrier_out")
print("rank %s passed" % rank, flush=True)
ask("cmd=finalize", "cmd=finalize_ack")
