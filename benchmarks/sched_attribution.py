#!/usr/bin/env python3
"""Who had the CPUs while an honest peer's round trip took long.

threechains-bench-compile-isolation writes, per transport, each phase's
bounds and the start of its longest round trip on CLOCK_MONOTONIC, and the
pids of the target (which serves on its main thread) and of the measuring
source. Run it under the scheduler's trace on the same clock:

    perf sched record -k CLOCK_MONOTONIC -o sched.data -- \\
        ./build/benchmarks/threechains-bench-compile-isolation ... --json run.jsonl
    python3 benchmarks/sched_attribution.py --json run.jsonl --trace sched.data

For each phase this prints the longest round trip's interval, how long the
serving thread and the source ran in it, and which tasks ran on each CPU
meanwhile; then the serving thread's longest time off its CPU in the phase
and who ran then. A round trip can only take long where one of the two
threads does not run (or runs long): this names the tasks that had the CPU.
"""

import argparse
import collections
import json
import re
import subprocess
import sys

# perf sched timehist: "time [cpu] comm[tid/pid] wait sch-delay run"
LINE = re.compile(r"^\s*(\d+\.\d+)\s+\[(\d+)\]\s+(.*?)\[(\d+)(?:/(\d+))?\]\s+"
                  r"([\d.]+)\s+([\d.]+)\s+([\d.]+)")


class Slice:
    """One stretch a task ran on a CPU: [start, end] in seconds."""

    __slots__ = ("start", "end", "cpu", "comm", "tid", "pid")

    def __init__(self, start, end, cpu, comm, tid, pid):
        self.start, self.end, self.cpu = start, end, cpu
        self.comm, self.tid, self.pid = comm, tid, pid


def read_slices(trace):
    if trace.endswith(".data"):
        try:
            text = subprocess.run(["perf", "sched", "timehist", "-i", trace], check=True,
                                  capture_output=True, text=True).stdout
        except FileNotFoundError:
            sys.exit("sched_attribution: no perf here (Debian: linux-perf); or pass "
                     "`perf sched timehist -i DATA` saved as text")
        except subprocess.CalledProcessError as error:
            sys.exit(f"sched_attribution: perf sched timehist -i {trace}: {error.stderr.strip()}")
    else:
        with open(trace, encoding="utf-8") as f:
            text = f.read()
    slices = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        end = float(m.group(1))
        run = float(m.group(8)) / 1000.0
        tid = int(m.group(4))
        pid = int(m.group(5)) if m.group(5) else tid
        slices.append(Slice(end - run, end, int(m.group(2)), m.group(3).strip(), tid, pid))
    if not slices:
        sys.exit(f"sched_attribution: no scheduler events in {trace}")
    slices.sort(key=lambda s: s.start)
    return slices


def overlap(s, begin, end):
    return max(0.0, min(s.end, end) - max(s.start, begin))


def who_ran(slices, begin, end):
    """{cpu: [(ms, task)]} of what ran in [begin, end], largest first."""
    per_cpu = collections.defaultdict(lambda: collections.Counter())
    for s in slices:
        if s.start > end:
            break
        t = overlap(s, begin, end)
        if t > 0:
            per_cpu[s.cpu][f"{s.comm}[{s.tid}]"] += t * 1000.0
    return {cpu: sorted(((ms, task) for task, ms in tasks.items()), reverse=True)
            for cpu, tasks in sorted(per_cpu.items())}


def ran_ms(slices, tid, begin, end):
    return sum(overlap(s, begin, end) for s in slices if s.tid == tid) * 1000.0


def gaps(slices, tid, begin, end):
    """The thread's times off every CPU within [begin, end]: (start, end,
    the CPU it came back on)."""
    mine = [s for s in slices if s.tid == tid and s.end > begin and s.start < end]
    out = []
    previous_end = begin
    last_cpu = None
    for s in mine:
        if s.start > previous_end:
            out.append((previous_end, s.start, s.cpu))
        previous_end = max(previous_end, s.end)
        last_cpu = s.cpu
    # Off from its last stretch to the end (or all along: no CPU to name).
    if previous_end < end and last_cpu is not None:
        out.append((previous_end, end, last_cpu))
    return out


def longest_gap(slices, tid, begin, end):
    """The thread's longest time off every CPU within [begin, end]."""
    best = (0.0, begin, begin)
    for start, stop, _ in gaps(slices, tid, begin, end):
        if stop - start > best[0]:
            best = (stop - start, start, stop)
    return best


def displaced_by(slices, tid, begin, end):
    """Who ran on the thread's CPU while it was off it, in [begin, end]:
    ([(ms, task)] largest first, the thread's total ms off)."""
    tasks = collections.Counter()
    total = 0.0
    by_cpu = collections.defaultdict(list)
    for s in slices:
        by_cpu[s.cpu].append(s)
    for start, stop, cpu in gaps(slices, tid, begin, end):
        total += (stop - start) * 1000.0
        for s in by_cpu[cpu]:
            if s.end > start and s.start < stop and s.tid != tid:
                tasks[f"{s.comm}[{s.tid}]"] += overlap(s, start, stop) * 1000.0
    return sorted(((ms, task) for task, ms in tasks.items()), reverse=True), total


def describe(tasks_by_cpu, indent):
    out = []
    for cpu, tasks in tasks_by_cpu.items():
        named = ", ".join(f"{task} {ms:.2f} ms" for ms, task in tasks[:4] if ms >= 0.01)
        out.append(f"{indent}CPU {cpu}: {named}")
    return "\n".join(out)


def report(runs, slices):
    out = []
    for run in runs:
        serving, source = run["target_pid"], run["source_pid"]
        out.append(f"{run['transport']} ({run['tier']} tier): serving thread {serving}, "
                   f"source {source}")
        for name, phase in run["phases"].items():
            begin = phase["longest_began"]
            end = begin + phase["longest_us"] / 1e6
            out.append(f"  {name}: longest round trip {phase['longest_us'] / 1000:.2f} ms at "
                       f"+{begin - run['phases']['quiet']['began']:.3f} s; in it the serving "
                       f"thread ran {ran_ms(slices, serving, begin, end):.2f} ms, the source "
                       f"{ran_ms(slices, source, begin, end):.2f} ms")
            out.append(describe(who_ran(slices, begin, end), "    "))
            gap, gap_begin, gap_end = longest_gap(slices, serving, phase["began"], phase["ended"])
            out.append(f"    the serving thread's longest time off the CPUs in the phase: "
                       f"{gap * 1000:.2f} ms; meanwhile:")
            out.append(describe(who_ran(slices, gap_begin, gap_end), "      "))
            tasks, total = displaced_by(slices, serving, phase["began"], phase["ended"])
            named = ", ".join(f"{task} {ms:.1f} ms" for ms, task in tasks[:4])
            out.append(f"    in all the serving thread was off the CPUs {total:.1f} ms of the "
                       f"phase's {(phase['ended'] - phase['began']):.1f} s; on its CPU "
                       f"meanwhile: {named}")
    return "\n".join(out)


def self_test(directory):
    """A made-up trace: the serving thread (pid 10) spins on CPU 1 but for
    6 ms in which `worker` runs there, and the phase's last 4 ms, `worker`
    again; the source (pid 20) spins on CPU 0."""
    import os
    header = ("           time    cpu  task name                       wait time  sch delay   run time\n"
              "                        [tid/pid]                          (msec)     (msec)     (msec)\n"
              "--------------- ------  ------------------------------  ---------  ---------  ---------\n")
    lines = [
        "     100.010000 [0001]  target[10]                          0.000      0.000     10.000",
        "     100.016000 [0001]  worker[30]                          0.000      0.000      6.000",
        "     100.030000 [0001]  target[10]                          6.000      0.000     14.000",
        "     100.030000 [0000]  bench[20]                           0.000      0.000     30.000",
        "     100.034000 [0001]  worker[30]                         14.000      0.000      4.000",
    ]
    trace = os.path.join(directory, "timehist.txt")
    with open(trace, "w", encoding="utf-8") as f:
        f.write(header + "\n".join(lines) + "\n")
    phase = {"began": 100.0, "ended": 100.034, "longest_began": 100.009, "longest_us": 8000.0}
    run = {"transport": "shm", "tier": "window", "target_pid": 10, "source_pid": 20,
           "phases": {"quiet": dict(phase), "compile": dict(phase)}}
    text = report([run], read_slices(trace))
    expected = ["the serving thread ran 2.00 ms, the source 8.00 ms",
                "CPU 1: worker[30] 6.00 ms, target[10] 2.00 ms",
                "longest time off the CPUs in the phase: 6.00 ms",
                "off the CPUs 10.0 ms of the phase's 0.0 s; on its CPU meanwhile: worker[30] 10.0 ms"]
    missing = [e for e in expected if e not in text]
    if missing:
        sys.exit("sched_attribution self-test: expected " + repr(missing) + " in:\n" + text)
    print(text)
    print("sched_attribution self-test: passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="the benchmark's --json file")
    parser.add_argument("--trace", help="perf sched record's data (perf.data) or timehist's text")
    parser.add_argument("--self-test", metavar="DIR",
                        help="check the attribution on a made-up trace written in DIR")
    args = parser.parse_args()
    if args.self_test:
        self_test(args.self_test)
        return
    if not args.json or not args.trace:
        parser.error("--json and --trace are both needed")
    slices = read_slices(args.trace)
    first, last = slices[0].start, max(s.end for s in slices)
    try:
        with open(args.json, encoding="utf-8") as f:
            runs = [json.loads(line) for line in f if '"phases"' in line]
    except OSError as error:
        sys.exit(f"sched_attribution: {args.json}: {error.strerror}")
    runs = [r for r in runs if r["phases"]["quiet"]["began"] >= first - 1 and
            r["phases"]["compile"]["ended"] <= last + 1]
    if not runs:
        sys.exit("sched_attribution: no run in the JSON file falls within the trace "
                 "(was it recorded with -k CLOCK_MONOTONIC?)")
    print(report(runs, slices))


if __name__ == "__main__":
    main()
