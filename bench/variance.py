#!/usr/bin/env python3
"""Where a comparison's noise comes from: the variance table of docs/timing.md ("Where the variance is").

Reads a samples.csv (compare --output-dir, or a bundle's) of an A/A comparison and prints, per workload:
- the per-block log ratio d = ln(median B / median A): its sd and scaled MAD, and the 95% half-width it gives;
- the visit medians: their spread, and the share of it each factor explains (code layout, stack offset, the block
  the visit belongs to, the decile of the session's time), next to the share chance alone would explain;
- a variogram of the visit medians in the order the visits ran (how much two visits differ as they lie further
  apart), and of the calls in the order they ran within a block: drift shows as differences growing with the lag;
- one process against itself: the first half of a visit's timed calls against the second half, and two visits
  side by side, which bounds every component fixed for a process's lifetime (its pages, layout and offsets).

Usage: bench/variance.py SAMPLES_CSV [WORKLOAD]
The rows of a block are in the order its calls ran (docs/timing.md, "Raw data"). No third-party packages.
"""
import collections
import csv
import math
import statistics as st
import sys


def mad(xs):
    m = st.median(xs)
    return st.median([abs(x - m) for x in xs]) * 1.4826


def pct(x):
    return f"{100 * x:.1f}%"


def share(values, keys):
    """Share of the variance of `values` between the groups `keys` defines, and what chance would give."""
    groups = collections.defaultdict(list)
    for v, k in zip(values, keys):
        groups[k].append(v)
    mean = st.fmean(values)
    total = sum((v - mean) ** 2 for v in values)
    between = sum(len(g) * (st.fmean(g) - mean) ** 2 for g in groups.values())
    return between / total if total else 0.0, (len(groups) - 1) / max(len(values) - 1, 1)


def analyze(rows, workload):
    timed = [r for r in rows if r["warmup"] == "0" and int(r["block"]) >= 0 and r["output_valid"] == "1"]
    if not timed:
        print(f"{workload}: no timed samples")
        return
    visits = collections.OrderedDict()
    for r in timed:
        visits.setdefault((int(r["block"]), r["arm"]), []).append(r)
    arms = sorted({a for (_, a) in visits})
    medians = {k: st.median(int(r["ns"]) for r in v) for k, v in visits.items()}
    blocks = sorted({b for (b, _) in visits})
    d = [math.log(medians[(b, arms[1])] / medians[(b, arms[0])]) for b in blocks
         if len(arms) == 2 and (b, arms[0]) in medians and (b, arms[1]) in medians]
    print(f"== {workload}: {len(blocks)} blocks, {len(timed)} timed calls, "
          f"{len(timed) / max(len(visits), 1):.0f} per visit")
    if len(d) >= 2:
        print(f"per-block log ratio d: sd {pct(st.stdev(d))}, scaled MAD {pct(mad(d))}; 95% half-width over these "
              f"blocks: t {pct(1.96 * st.stdev(d) / math.sqrt(len(d)))}, robust {pct(1.96 * mad(d) / math.sqrt(len(d)))}")
    keys = list(medians)
    logs = [math.log(medians[k]) for k in keys]
    first = {k: visits[k][0] for k in keys}
    print(f"visit medians: sd of log {pct(st.stdev(logs))}, scaled MAD {pct(mad(logs))}, "
          f"median {st.median(medians.values()) / 1000:.1f} us")
    nb = max(blocks) + 1
    factors = [
        ("code layout (arm, build of the pool)", [(k[1], first[k]["layout"]) for k in keys]),
        ("stack offset", [first[k]["stack_offset"] for k in keys]),
        ("block (both visits of a block)", [k[0] for k in keys]),
        ("decile of the session", [k[0] * 10 // nb for k in keys]),
        ("arm", [k[1] for k in keys]),
    ]
    for name, fk in factors:
        s, chance = share(logs, fk)
        print(f"  share explained by {name}: {pct(s)} (chance alone: {pct(chance)})")
    # Visits in the order they ran: within a block, by the first row of each visit.
    order = sorted(keys, key=lambda k: (k[0], timed.index(first[k])))
    seq = [math.log(medians[k]) for k in order]
    lags = [l for l in (1, 2, 4, 8, 16, 64, 256) if l < len(seq)]
    print("  visit variogram (per-visit sd of the difference at lag): " +
          ", ".join(f"{l}: {pct(mad([seq[i + l] - seq[i] for i in range(len(seq) - l)]) / math.sqrt(2))}"
                    for l in lags))
    # Calls in the order they ran within each block, whatever their arm.
    calls = collections.defaultdict(list)
    for r in timed:
        calls[int(r["block"])].append(math.log(int(r["ns"])))
    out = []
    for lag in (1, 2, 5, 10, 20, 40):
        diffs = [c[i + lag] - c[i] for c in calls.values() for i in range(len(c) - lag)]
        if len(diffs) > 10:
            out.append(f"{lag}: {pct(mad(diffs) / math.sqrt(2))}")
    print("  call variogram within blocks (per-call scaled MAD of the difference at lag): " + ", ".join(out))
    halves = []
    for v in visits.values():
        h = len(v) // 2
        if h >= 2:
            ns = [int(r["ns"]) for r in v]
            halves.append(math.log(st.median(ns[h:]) / st.median(ns[:h])))
    if len(halves) >= 2:
        print(f"  one process against itself (second half of a visit's calls vs first half): per-half sd "
              f"{pct(st.stdev(halves) / math.sqrt(2))}, scaled MAD {pct(mad(halves) / math.sqrt(2))}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    workloads = [sys.argv[2]] if len(sys.argv) > 2 else sorted({r["workload"] for r in rows})
    for w in workloads:
        analyze([r for r in rows if r["workload"] == w], w)


if __name__ == "__main__":
    main()
