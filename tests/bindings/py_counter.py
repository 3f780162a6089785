"""The counter ifunc from Python (the threechains package over the C API).

  py_counter.py target TRANSPORT PUBKEY FRAMES PORTFILE   serves until FRAMES ran
  py_counter.py target-confined ...                       the same, the code confined
  py_counter.py source TRANSPORT CONTAINER KEY FRAMES PORT  sends increments 1..FRAMES

Payloads go as struct-packed bytes, a bytearray, and a NumPy array where NumPy
is installed (said on stdout if it is not). The target checks the counter is
1 + 2 + ... + FRAMES, every frame run once."""
import ctypes
import os
import struct
import sys
import time

import threechains as tc

try:
    import numpy
except ImportError:
    numpy = None


def thread_cpus(name):
    """The CPUs the thread of this process named `name` may run on (None: no such thread)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                if comm.read().strip() == name:
                    return os.sched_getaffinity(int(tid))
        except OSError:  # ended meanwhile
            pass
    return None


def target(transport, public_key, frames, port_file, confined=False):
    worker = tc.Worker(transport)
    errors = []
    helper_cpu = max(os.sched_getaffinity(0))
    if confined:
        # The key signs code that runs confined only; the counter lives in
        # memory the receiver allocated for confined code (the window tier).
        trust = tc.Trust(peers=[public_key], code_signers=[public_key])
        try:
            tc.Receiver(worker, trust=trust, helper_cpus=[-1])
            print("python target: helper_cpus [-1] was not refused", file=sys.stderr)
            return 1
        except tc.Error as error:
            assert error.status == tc.Status.INVALID_ARGUMENT and "helper_cpus" in str(error), error
        # Its helpers (the compile worker, the window verifier) on one CPU.
        receiver = tc.Receiver(worker, trust=trust, on_error=errors.append,
                               helper_cpus=[helper_cpu])
        counter = ctypes.c_uint64.from_buffer(receiver.allocate_exposed("counter", 8))
        receiver.set_target_args(counter)
    else:
        counter = ctypes.c_uint64(0)
        receiver = tc.Receiver(worker,
                               trust=tc.Trust(peers=[public_key], native_code_signers=[public_key]),
                               target_args=counter, on_error=errors.append)
    with open(port_file + ".tmp", "w") as f:
        f.write(f"{receiver.port}\n")
    os.rename(port_file + ".tmp", port_file)  # appears whole
    deadline = time.monotonic() + 60
    stats = receiver.stats
    while (stats["frames_dispatched"] < frames or stats["peers_closed"] < 1) \
            and time.monotonic() < deadline:
        receiver.poll()
        stats = receiver.stats
    expected = frames * (frames + 1) // 2
    print(f"python target: counter {counter.value} (expected {expected}), "
          f"{stats['frames_dispatched']} frames run, {stats['code_loads']} code load(s), "
          f"{len(errors)} error(s) {[str(e) for e in errors]}")
    per_ifunc = receiver.ifunc_stats
    print(f"python target: per ifunc {per_ifunc}")
    # Confined over shared memory, frames ran in the window tier, several to
    # one way into the window.
    windowed = not confined or transport != "shm" or 0 < stats["frames_in_window_runs"] <= frames
    print(f"python target: {stats['frames_in_window_runs']} frames in window runs")
    value = counter.value
    counted = (len(per_ifunc) == 1 and per_ifunc[0]["name"] == "counter"
               and per_ifunc[0]["loaded"] and per_ifunc[0]["calls"] == frames
               and per_ifunc[0]["payload_bytes"] == 8 * frames and per_ifunc[0]["timed_calls"] >= 1
               and per_ifunc[0]["in_window"] == confined)
    # The window verifier, which checked the counter's code, runs where
    # helper_cpus said.
    placed = True
    if confined and len(os.sched_getaffinity(0)) >= 2:
        verifier = thread_cpus("tc-verify")
        placed = verifier == {helper_cpu}
        print(f"python target: the window verifier runs on CPUs {verifier} "
              f"(helper_cpus [{helper_cpu}]): {'ok' if placed else 'MISMATCH'}")
    elif confined:
        print("python target: this process may use one CPU: where helper_cpus put the helpers "
              "is not checked")
    del counter  # confined, a view of the receiver's memory: no use of it after close()
    receiver.close()
    # The source first tries a key this target does not trust: refused, and
    # the refusal reaches on_error as a tc.Error.
    ok = (counted and windowed and placed and value == expected and stats["frames_dispatched"] == frames
          and stats["frames_rejected"] == 0 and stats["code_loads"] == 1
          and len(errors) == stats["peers_refused"] >= 1
          and all(e.status == tc.Status.PEER_REFUSED for e in errors))
    return 0 if ok else 1


def source(transport, container, key, frames, port):
    # A failing call raises with the library's message and its status.
    try:
        tc.Ifunc.load("/nonexistent/counter.tcc")
        print("python source: a missing container was not reported", file=sys.stderr)
        return 1
    except tc.Error as error:
        assert error.status == tc.Status.IO and "/nonexistent/counter.tcc" in str(error), error

    worker = tc.Worker(transport)
    ifunc = tc.Ifunc.load(container)
    try:
        tc.Source(worker).connect("127.0.0.1", port, identity=tc.KeyPair.generate())
        print("python source: a channel without the trusted key was not refused", file=sys.stderr)
        return 1
    except tc.Error as error:
        if error.status != tc.Status.PEER_REFUSED:
            print(f"python source: the untrusted channel failed otherwise: {error}", file=sys.stderr)
            return 1
    channel = tc.Source(worker).connect("127.0.0.1", port, identity=tc.KeyPair.load(key), slots=8)
    if numpy is None:
        print("python source: NumPy is not installed: struct and bytearray payloads only")
    kinds = 3 if numpy is not None else 2
    for i in range(1, frames + 1):
        kind = i % kinds
        if kind == 0:
            channel.send(ifunc, struct.pack("<Q", i))
        elif kind == 1:
            while not channel.try_send(ifunc, bytearray(struct.pack("<Q", i))):
                channel.progress()
        else:
            channel.send(ifunc, numpy.array([i], dtype=numpy.uint64))
    sent = channel.frames_sent
    channel.close()
    print(f"python source: {sent} frames of '{ifunc.name}' sent"
          f"{' (a third as NumPy arrays)' if numpy is not None else ''}")
    return 0 if sent == frames else 1


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode in ("target", "target-confined") and len(args) == 4:
        sys.exit(target(args[0], args[1], int(args[2]), args[3], mode == "target-confined"))
    if mode == "source" and len(args) == 5:
        sys.exit(source(args[0], args[1], args[2], int(args[3]), int(args[4])))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
