#!/usr/bin/python3
"""Regenerates every plot in docs/bench/ from the data files beside it
(docs/bench/README.md lists both; docs/performance.md shows the plots).

    /usr/bin/python3 benchmarks/plot_all.py                      # every plot: docs/bench -> docs/bench
    /usr/bin/python3 benchmarks/plot_all.py DATA_DIR [OUT_DIR]    # the same, elsewhere
    /usr/bin/python3 benchmarks/plot_all.py --bench FILE [OUT_DIR]   # one threechains-bench run
    /usr/bin/python3 benchmarks/plot_all.py --chase FILE [OUT_DIR]   # one threechains-chase run

A plot is named after its data: `cached-sweep-2026-11-21.jsonl` gives
`cached-sweep-shm-2026-11-21.png` and `cached-sweep-tcp-2026-11-21.png`.
The kinds of plot:

  bench         threechains-bench: latency and message rate against payload
                size, one line per mode, one figure per transport
  chase         threechains-chase: chases per second against depth (a panel
                per server count) and against servers at the deepest depth
  connect-many  threechains-bench-connect --many: ms per channel against
                channels opened, one by one and with Source::connect_all
  spin-budget   threechains-bench-idle --policies sleep-N: a Receiver's CPU
                and wake-up against its spin budget, before and after the
                waiting source yields its core
  crowd         threechains-bench-idle --crowd: one channel's rate against
                idle peers connected

Needs Debian's python3-matplotlib (benchmarks/run-sweep.sh installs it)."""
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

# Every plot in docs/bench: (kind, data file(s), plot file).
BENCH_PLOTS = ["cached-sweep-2026-11-21.jsonl", "cached-am-strong-sizes-2026-11-22.jsonl"]
CHASE_PLOTS = ["chase-sweep-2026-11-21.jsonl"]
CONNECT_MANY = ("progress-connect-many-2026-11-26.jsonl", "progress-connect-many-2026-11-26.png")
SPIN_BUDGET = (("progress-spin-budget-before-e440395-2026-11-26.jsonl", "source spins (before)", "o--"),
               ("progress-spin-budget-after-f7a9de4-2026-11-26.jsonl", "source yields (after)", "s-"))
SPIN_BUDGET_PLOT = "progress-spin-budget-2026-11-26.png"
CROWD = ("progress-crowd-2026-11-25.jsonl", "progress-crowd-2026-11-25.png")

BENCH_STYLE = {
    "am": dict(color="black", marker="o", linestyle="-"),
    "am-strong": dict(color="grey", marker="o", linestyle="--"),
    "ifunc-bitcode-cached": dict(color="tab:blue", marker="s", linestyle="-"),
    "ifunc-bitcode-uncached": dict(color="tab:blue", marker="s", linestyle=":"),
    "ifunc-binary-cached": dict(color="tab:orange", marker="^", linestyle="-"),
    "ifunc-binary-uncached": dict(color="tab:orange", marker="^", linestyle=":"),
}
CHASE_STYLE = {
    "am": dict(color="black", marker="o"),
    "get": dict(color="tab:red", marker="x"),
    "ifunc-bitcode": dict(color="tab:blue", marker="s"),
    "ifunc-binary": dict(color="tab:orange", marker="^"),
}


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def lines(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows(path: Path, bench: str):
    return [r for r in lines(path) if r.get("bench") == bench]


def plot_name(data: Path, part: str) -> str:
    """`<stem>-<date>.jsonl` -> `<stem>-<part>-<date>.png` (a name with no date: `<stem>-<part>.png`)."""
    stem = data.name.rsplit(".", 1)[0]
    dated = re.fullmatch(r"(.*)-(\d{4}-\d{2}-\d{2})", stem)
    return f"{dated[1]}-{part}-{dated[2]}.png" if dated else f"{stem}-{part}.png"


def save(fig, path: Path, dpi: int) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    print(f"wrote {path}")


def bench(data: Path, out: Path) -> None:
    plt = pyplot()
    series = defaultdict(lambda: defaultdict(list))  # (transport, metric) -> mode -> [(size, value)]
    for r in lines(data):
        if r.get("metric") in ("latency", "rate"):
            series[(r["transport"], r["metric"])][r["mode"]].append((r["payload"], r["value"]))
    for transport in sorted({t for t, _ in series}):
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        for ax, metric in zip(axes, ("latency", "rate")):
            for mode, points in sorted(series[(transport, metric)].items()):
                points.sort()
                ax.plot([p[0] for p in points], [p[1] for p in points], label=mode,
                        **BENCH_STYLE.get(mode, {}))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("payload (bytes)")
            ax.set_ylabel("half round trip (us)" if metric == "latency" else "messages per second (M)")
            ax.set_title(f"{transport}: {'latency' if metric == 'latency' else 'message rate'}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        save(fig, out / plot_name(data, transport), 110)
        plt.close(fig)


def chase(data: Path, out: Path) -> None:
    plt = pyplot()
    all_rows = lines(data)
    for transport in sorted({r["transport"] for r in all_rows}):
        mine = [r for r in all_rows if r["transport"] == transport]
        servers = sorted({r["servers"] for r in mine})
        fig, axes = plt.subplots(1, len(servers) + 1, figsize=(5 * (len(servers) + 1), 4.5))
        for ax, n in zip(axes, servers):
            by_mode = defaultdict(list)
            for r in mine:
                if r["servers"] == n:
                    by_mode[r["mode"]].append((r["depth"], r["chases_per_s"]))
            for mode, pts in sorted(by_mode.items()):
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=mode, **CHASE_STYLE.get(mode, {}))
            ax.set(xscale="log", yscale="log", xlabel="depth", ylabel="chases per second",
                   title=f"{transport}, {n} server(s)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        deepest = max(r["depth"] for r in mine)
        ax = axes[-1]
        by_mode = defaultdict(list)
        for r in mine:
            if r["depth"] == deepest:
                by_mode[r["mode"]].append((r["servers"], r["chases_per_s"]))
        for mode, pts in sorted(by_mode.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=mode, **CHASE_STYLE.get(mode, {}))
        ax.set(yscale="log", xlabel="servers", ylabel="chases per second", title=f"{transport}, depth {deepest}")
        ax.set_xticks(servers)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, out / plot_name(data, transport), 100)
        plt.close(fig)


def connect_many(data: Path, out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, transport in zip(axes, ["shm", "tcp"]):
        r = sorted((x for x in rows(data / CONNECT_MANY[0], "connect_many") if x["transport"] == transport),
                   key=lambda x: x["channels"])
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
    save(fig, out / CONNECT_MANY[1], 100)
    plt.close(fig)


def spin_budget(data: Path, out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, transport in enumerate(["shm", "tcp"]):
        floor = 0
        for name, label, style in SPIN_BUDGET:
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
    save(fig, out / SPIN_BUDGET_PLOT, 100)
    plt.close(fig)


def crowd(data: Path, out: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    series = defaultdict(lambda: defaultdict(list))
    for x in rows(data / CROWD[0], "crowd"):
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
    save(fig, out / CROWD[1], 100)
    plt.close(fig)


def plot_everything(data: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in BENCH_PLOTS:
        bench(data / name, out)
    for name in CHASE_PLOTS:
        chase(data / name, out)
    connect_many(data, out)
    spin_budget(data, out)
    crowd(data, out)


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv and argv[0] in ("--bench", "--chase"):
        if len(argv) not in (2, 3):
            print(__doc__, file=sys.stderr)
            return 2
        data = Path(argv[1])
        out = Path(argv[2]) if len(argv) == 3 else data.parent
        out.mkdir(parents=True, exist_ok=True)
        (bench if argv[0] == "--bench" else chase)(data, out)
        return 0
    if len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    data = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "docs" / "bench"
    out = Path(argv[1]) if len(argv) == 2 else data
    plot_everything(data, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
