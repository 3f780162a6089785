#!/usr/bin/python3
"""Plots threechains-chase JSON lines: chases per second against depth (one
line per mode; one panel per server count; one figure per transport), and
against the number of servers at the deepest depth.

    /usr/bin/python3 benchmarks/plot_chase.py docs/bench/chase.jsonl docs/bench"""
import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "am": dict(color="black", marker="o"),
    "get": dict(color="tab:red", marker="x"),
    "ifunc-bitcode": dict(color="tab:blue", marker="s"),
    "ifunc-binary": dict(color="tab:orange", marker="^"),
}


def main(source: str, out_dir: str) -> None:
    rows = [json.loads(l) for l in Path(source).read_text().splitlines() if l.strip()]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for transport in sorted({r["transport"] for r in rows}):
        mine = [r for r in rows if r["transport"] == transport]
        servers = sorted({r["servers"] for r in mine})
        fig, axes = plt.subplots(1, len(servers) + 1, figsize=(5 * (len(servers) + 1), 4.5))
        for ax, n in zip(axes, servers):
            by_mode = defaultdict(list)
            for r in mine:
                if r["servers"] == n:
                    by_mode[r["mode"]].append((r["depth"], r["chases_per_s"]))
            for mode, pts in sorted(by_mode.items()):
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=mode, **STYLE.get(mode, {}))
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
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=mode, **STYLE.get(mode, {}))
        ax.set(yscale="log", xlabel="servers", ylabel="chases per second", title=f"{transport}, depth {deepest}")
        ax.set_xticks(servers)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = Path(out_dir) / f"chase-{transport}.png"
        fig.savefig(path, dpi=100)
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
