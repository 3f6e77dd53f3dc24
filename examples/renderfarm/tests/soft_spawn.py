"""MPI_Comm_spawn with the MPI `soft` info key, as the farm's growth uses it.

Usage: soft_spawn.py MAXPROCS SOFT
Prints "soft spawn: remote R errcodes E0,E1,..." (R: the processes started,
the intercommunicator's remote group) or "soft spawn: refused: ..." and exits
0 either way; the children disconnect and exit.
"""

import sys

from mpi4py import MPI


def main():
    parent = MPI.Comm.Get_parent()
    if parent != MPI.COMM_NULL:
        parent.Disconnect()
        return
    maxprocs, soft = int(sys.argv[1]), sys.argv[2]
    info = MPI.Info.Create()
    info.Set("soft", soft)
    errcodes = []
    try:
        inter = MPI.COMM_SELF.Spawn(sys.executable, [__file__], maxprocs, info=info, errcodes=errcodes)
    except MPI.Exception as e:
        print(f"soft spawn: refused: {e.Get_error_string().splitlines()[-1].strip()}", flush=True)
        return
    print(f"soft spawn: remote {inter.Get_remote_size()} errcodes {','.join(map(str, errcodes))}", flush=True)
    inter.Disconnect()


main()
