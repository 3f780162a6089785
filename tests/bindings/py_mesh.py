"""A mesh bootstrapped from the launcher, from Python (Node.bootstrap):

  mpirun -np N python3 py_mesh.py LAUNCHER TRANSPORT RELAY_CONTAINER KEY PUBKEY

As c_mesh.c: rank 0 starts a relay chain (tests/ifuncs/xrdma/relay.c) that goes
round the ranks 10 times; every rank checks it ran exactly its share of the
hops, each from the previous rank."""
import ctypes
import struct
import sys
import time

import threechains as tc


class RelayState(ctypes.Structure):  # struct relay_state in relay.c
    _fields_ = [("seen", ctypes.c_int64), ("finished", ctypes.c_int64),
                ("bad_origin", ctypes.c_int64)]


def main(launcher, transport, container, key, public_key):
    state = RelayState()
    identity = tc.KeyPair.load(key)
    node = tc.Node.bootstrap(tc.Worker(transport), launcher, identity=identity,
                             trust=tc.Trust(peers=[public_key], native_code_signers=[public_key]),
                             exposed={"relay_state": state})
    rank, ranks = node.rank, node.ranks
    forwards = 10 * ranks
    share = sum(1 for k in range(forwards + 1) if (1 + k) % ranks == rank)
    ok = True
    if rank == 0:
        node.send(1 % ranks, tc.Ifunc.load(container), struct.pack("<qq", forwards, 0))
        deadline = time.monotonic() + 60
        while state.finished == 0 and time.monotonic() < deadline:
            node.poll()
        ok = state.finished == forwards
        print(f"py_mesh: {ranks} ranks through {launcher}, the relay made {state.finished} "
              f"forwards (expected {forwards})")
    node.barrier()
    ok = ok and state.seen == share and state.bad_origin == 0
    print(f"py_mesh rank {rank}: ran {state.seen} hops (expected {share}): "
          f"{'ok' if ok else 'WRONG'}", flush=True)
    node.close()
    node.barrier()  # every rank said goodbye before any goes
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
