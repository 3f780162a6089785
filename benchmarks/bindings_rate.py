"""The Python package's cost per send, against the C API's, in one run:
runs threechains-bench-bindings' counterpart in Python — a Receiver on its
progress thread, a channel from Python, rounds of N 8-byte cached sends — and
prints the median per-send time.

  PYTHONPATH=build/python python3 benchmarks/bindings_rate.py \
      --key build/keys/dev.key --pub build/keys/dev.pub \
      --container build/benchmarks/bench_counter_binary.tcc [--transport shm] [-n 200000]"""
import argparse
import ctypes
import json
import statistics
import struct
import time

import threechains as tc

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--transport", default="shm")
parser.add_argument("-n", type=int, default=200000)
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--key", required=True)
parser.add_argument("--pub", required=True)
parser.add_argument("--container", required=True)
parser.add_argument("--json")
args = parser.parse_args()

counter = ctypes.c_uint64(0)
receiver = tc.Receiver(tc.Worker(args.transport),
                       trust=tc.Trust(peers=[args.pub], native_code_signers=[args.pub]),
                       target_args=counter)
receiver.start()
channel = tc.Source(tc.Worker(args.transport)).connect("127.0.0.1", receiver.port,
                                                        identity=tc.KeyPair.load(args.key))
ifunc = tc.Ifunc.load(args.container)
one = struct.pack("<Q", 1)
channel.send(ifunc, one)
channel.flush()
per_send = []
for _ in range(args.rounds):
    start = time.perf_counter()
    for _ in range(args.n):
        channel.send(ifunc, one)
    channel.flush()
    per_send.append((time.perf_counter() - start) / args.n * 1e6)
channel.close()
receiver.stop()
expected = 1 + args.n * args.rounds
us = statistics.median(per_send)
print(f"{args.transport} 8 B cached sends from Python, median of {args.rounds} rounds of {args.n}: "
      f"{us:.3f} us per send; counter {counter.value} (expected {expected})")
if args.json:
    with open(args.json, "a") as out:
        out.write(json.dumps({"bench": "bindings-python", "transport": args.transport,
                              "sends": args.n, "rounds": args.rounds, "python_us": us}) + "\n")
raise SystemExit(0 if counter.value == expected else 1)
