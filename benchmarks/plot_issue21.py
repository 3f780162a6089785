#!/usr/bin/python3
"""Plots of the progress engine's figures (issue 21), from the benchmarks'
JSON lines in docs/bench/:

  connect-many.png  milliseconds per channel against channels opened, one by
                    one and with Source::connect_all (threechains-bench-connect --many)
  spin-budget.png   a Receiver's CPU and its wake-up against its spin budget
                    (threechains-bench-idle --policies sleep-N), before and
                    after the waiting source yields its core
  crowd.png         one channel's rate against idle peers connected
                    (threechains-bench-idle --crowd)

    /usr/bin/python3 benchmarks/plot_issue21.py docs/bench docs/bench

Needs Debian's python3-matplotlib."""
import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(path: Path, bench: str):
    return [r for r in (json.loads(l) for l in path.read_text().splitlines() if l.strip())
            if r.get("bench") == bench]


def connect_many(data: Path, out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, transport in zip(axes, ["shm", "tcp"]):
        r = sorted((x for x in rows(data / "issue21-connect-many.jsonl", "connect_many")
                    if x["transport"] == transport), key=lambda x: x["channels"])
        n = [x["channels"] for x in r]
        for key, label, style in [("serial_ms", "one by one (connect)", "o-"),
                                  ("all4_ms", "connect_all, 4 in flight", "s-"),
                                  ("all64_ms", "connect_all, 64 in flight", "^-")]:
            ax.plot(n, [x[key] for x in r], style, label=label)
        ax.axhline(1.0, color="grey", linestyle=":", label="goal: 1 ms a peer")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("channels opened to one Receiver")
        ax.set_ylabel("ms per channel")
        ax.set_title(f"opening channels over {transport}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "issue21-connect-many.png", dpi=100)


def spin_budget(data: Path, out: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, transport in enumerate(["shm", "tcp"]):
        for name, label, style in [("issue21-idle-spin.jsonl", "source spins (before)", "o--"),
                                   ("issue21-idle-spin-yield.jsonl", "source yields (after)", "s-")]:
            r = [x for x in rows(data / name, "idle")
                 if x["transport"] == transport and x["policy"].startswith("sleep-")]
            r.sort(key=lambda x: int(x["policy"][6:]))
            spin = [max(int(x["policy"][6:]), 1) for x in r]
            axes[0][col].plot(spin, [x["wake_rtt_us"] for x in r], style, label=label)
            axes[1][col].plot(spin, [x["sparse_cpu_cores"] for x in r], style, label=label)
            floor = r[0]["kernel_wake_floor_us"] if r else 0
        axes[0][col].axhline(floor, color="grey", linestyle=":", label="pipe wake-up floor")
        axes[0][col].set_yscale("log")
        axes[0][col].set_ylabel("round trip after 20 ms idle (us)")
        axes[1][col].set_ylabel("target CPU, a frame every 20 ms (cores)")
        for row in range(2):
            axes[row][col].set_xscale("log")
            axes[row][col].set_xlabel("spin budget (us; 0 drawn at 1)")
            axes[row][col].set_title(transport)
            axes[row][col].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "issue21-spin-budget.png", dpi=100)


def crowd(data: Path, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    series = defaultdict(lambda: defaultdict(list))
    for x in rows(data / "issue21-crowd.jsonl", "crowd"):
        series[(x["transport"], x["policy"])][x["peers"]].append(x["vs_first"])
    for (transport, policy), by_peers in sorted(series.items()):
        peers = sorted(by_peers)
        med = [sorted(by_peers[p])[len(by_peers[p]) // 2] for p in peers]
        ax.plot(peers, med, "o-" if policy == "sleep" else "x--", label=f"{transport}, {policy}")
    ax.axhline(0.95, color="grey", linestyle=":", label="goal: 0.95x")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("peers connected (one streams, the rest idle)")
    ax.set_ylabel("rate of the one, vs alone (median of runs)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "issue21-crowd.png", dpi=100)


if __name__ == "__main__":
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    connect_many(data, out)
    spin_budget(data, out)
    crowd(data, out)
