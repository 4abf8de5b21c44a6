#!/usr/bin/env python3
"""Change-point accuracy on a second, held-out public set: the Time Series Segmentation Benchmark.

  benches/changepoints_tssb.py TSSB_DIR [--lockstep BIN] [--variant LABEL=SQL_ARGS ...]
                               [--no-ruptures] [--boot 2000] [--json OUT] [--per-series]

TSSB_DIR is a checkout of https://github.com/ermshaua/time-series-segmentation-benchmark
(Ermshaus, Schäfer & Leser, "ClaSP: parameter-free time series segmentation", DMKD 2023):
`tssb/datasets/desc.txt` (one line per series: name, window size, change points) and
`tssb/datasets/<name>.txt` (one value per line). 75 series, 1-9 segments, 240-20,700 samples.
Each series concatenates z-normalised instances of the classes of one UCR/UEA classification
data set (real measurements: ECGs, motion, spectra, outlines, power demand, ...); the change
points are where one class's instances end and the next class's begin, so they are exact,
not annotated by eye.

What the set tests: segments differ in the *shape* of a recurring pattern (frequency,
waveform), and every instance was z-normalised before concatenation, so the mean and the
spread of adjacent segments are about the same by construction. Lockstep's detector looks for
changes of level, slope and spread; this set shows what it does where those are absent. To
make that visible, series are also grouped (from the ground truth only, before any result)
by whether at least one true change also moves the level or the spread:
`|Δ mean| / pooled sd ≥ 0.5` or `sd ratio ≥ 1.5` between the two true segments it separates.

The set was never used to choose any parameter: it is scored once with the defaults chosen on
TCPD's tune half, its quality-control series and synthetic series
(`benches/changepoints_tcpd.py`).

Methods (same run): "zero" (no change), Lockstep through the user path (`lockstep import` of a
`samples.csv` bundle, one `lockstep sql` query per variant), ruptures Pelt/Binseg (l2, the
documented penalty `log(n) · σ²`) and KernelCPD (rbf, `pen = log(n)`) — the code and settings
of `changepoints_tcpd.py`, reused, except that candidates are every 5 samples (ruptures'
default `jump=5`; with every sample its Python Pelt takes minutes per 20,000-sample series).

Scoring, fixed before any result: the TCPD F1 with one annotator (the ground truth), index 0
in both sets, a margin of `max(5, round(0.01 · n))` samples (TSSB series are long: 5 samples of
a 10,000-sample series is far stricter than on TCPD's series of ~200); segmentation cover as in
TCPD (and TSSB's own evaluation). Means over series with 95 % percentile bootstrap intervals
over series.
"""
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import changepoints_tcpd as tcpd  # noqa: E402  (shared scoring, runners and tables)


def margin(n):
    return max(5, round(0.01 * n))


def load(root):
    base = os.path.join(root, "tssb", "datasets")
    if not os.path.isdir(base):
        base = root
    series = {}
    with open(os.path.join(base, "desc.txt")) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) < 2:
                continue
            name, cps = parts[0], [int(c) for c in parts[2:] if c.strip()]
            values = np.loadtxt(os.path.join(base, f"{name}.txt"), dtype=np.float64).reshape(-1)
            series[name] = {"values": values, "annotations": [cps]}
    return series


def level_or_spread_change(values, cps):
    """Whether some true change also moves the level or the spread (from the truth only)."""
    bounds = [0] + list(cps) + [len(values)]
    segs = [values[a:b] for a, b in zip(bounds, bounds[1:])]
    for left, right in zip(segs, segs[1:]):
        s1, s2 = left.std(), right.std()
        pooled = np.sqrt((s1 * s1 + s2 * s2) / 2) or 1.0
        ratio = max(s1, s2) / max(min(s1, s2), 1e-12)
        if abs(right.mean() - left.mean()) / pooled >= 0.5 or ratio >= 1.5:
            return True
    return False


def main():
    args = tcpd.parse_args(__doc__, "tssb")
    series = load(args.tssb)
    binary = tcpd.lockstep_binary(args.lockstep)
    methods = tcpd.run_methods(series, args, binary, jump=5)

    scores = {m: {} for m in methods}
    for m, found in methods.items():
        for name, s in series.items():
            n = len(s["values"])
            scores[m][name] = (tcpd.f1(s["annotations"], found[name], margin(n)),
                               tcpd.cover(s["annotations"], found[name], n), len(found[name]))

    visible = {n for n, s in series.items() if level_or_spread_change(s["values"], s["annotations"][0])}
    groups = {
        "all TSSB": list(series),
        "some true change moves level or spread": [n for n in series if n in visible],
        "shape-only changes (or none)": [n for n in series if n not in visible],
    }
    rng = random.Random(17)
    print(f"TSSB: {len(series)} series; lockstep binary: {binary}\n")
    for g, names in groups.items():
        tcpd.print_table(g, names, methods, scores, args.boot, rng)
    tcpd.report_series(args, methods, scores, ["n", "true", "level/spread"], [
        (n, [len(s["values"]), len(s["annotations"][0]), "yes" if n in visible else "no"])
        for n, s in series.items()])


if __name__ == "__main__":
    main()
