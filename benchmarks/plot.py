#!/usr/bin/python3
"""Turns threechains-bench JSON lines into PNG plots: latency and message rate
against payload size, one line per mode, one figure per transport.

    /usr/bin/python3 benchmarks/plot.py docs/bench/sweep.jsonl docs/bench

Needs Debian's python3-matplotlib (benchmarks/run-sweep.sh installs it)."""
import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "am": dict(color="black", marker="o", linestyle="-"),
    "am-strong": dict(color="grey", marker="o", linestyle="--"),
    "ifunc-bitcode-cached": dict(color="tab:blue", marker="s", linestyle="-"),
    "ifunc-bitcode-uncached": dict(color="tab:blue", marker="s", linestyle=":"),
    "ifunc-binary-cached": dict(color="tab:orange", marker="^", linestyle="-"),
    "ifunc-binary-uncached": dict(color="tab:orange", marker="^", linestyle=":"),
}


def main(source: str, out_dir: str) -> None:
    rows = [json.loads(line) for line in Path(source).read_text().splitlines() if line.strip()]
    series = defaultdict(lambda: defaultdict(list))  # (transport, metric) -> mode -> [(size, value)]
    for r in rows:
        if r.get("metric") in ("latency", "rate"):
            series[(r["transport"], r["metric"])][r["mode"]].append((r["payload"], r["value"]))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for transport in sorted({t for t, _ in series}):
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        for ax, metric in zip(axes, ("latency", "rate")):
            for mode, points in sorted(series[(transport, metric)].items()):
                points.sort()
                ax.plot([p[0] for p in points], [p[1] for p in points], label=mode, **STYLE.get(mode, {}))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("payload (bytes)")
            ax.set_ylabel("half round trip (us)" if metric == "latency" else "messages per second (M)")
            ax.set_title(f"{transport}: {'latency' if metric == 'latency' else 'message rate'}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = Path(out_dir) / f"{transport}.png"
        fig.savefig(path, dpi=110)
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
