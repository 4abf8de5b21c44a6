#!/usr/bin/env python3
"""Change-point accuracy on a fourth, held-out public set: the Skoltech Anomaly Benchmark (SKAB).

  benches/changepoints_skab.py SKAB_DIR [--lockstep BIN] [--no-ruptures] [--boot 2000]
                               [--json OUT] [--per-series]

SKAB_DIR holds SKAB's `data/` folder (or is that folder): github.com/waico/SKAB, commit
b2c0d46c2971dcbfe71e26087b6d231998bb91c2 (2024-08-11), GPL-3.0 (Katser & Kozitsin, "Skoltech
Anomaly Benchmark", Kaggle 2020, doi 10.34740/KAGGLE/DSV/1693952). The 34 files used are checked
against that commit (SHA-256 of the list "sha256  data/<family>/<file>" over the 34 files, sorted
by path; `DATA_SHA256` below); a different data set stops the run (`--allow-other-data` runs
on other files, for mechanical tests on synthetic files only, and says so in its output).

Data: real recordings of a water-circulation testbed, one experiment and one induced fault per
file, 8 sensor channels (two vibration RMS, motor current and voltage, pressure, motor and fluid
temperature, flow rate), one row per second (about 5 % of steps are 2 s; a few gaps of 16-247 s),
745-1,327 rows, no missing values; `;`-separated with `datetime`, the 8 channels, `anomaly` and
`changepoint`. Files used (34, 37,401 rows, 129 change points):

  valve1  16 files (0-15): a valve closed at the pump's inlet;
  valve2   4 files (0-3):  a valve closed at the pump's outlet;
  other   14 files (1-14): fluid leaks and additions, rotor imbalance (sharp, linear, step,
          Dirac, exponential), slow and sudden water-level rise, draining to cavitation,
          two-phase flow, hot-water supply.

Skipped: data/anomaly-free/anomaly-free.csv (normal operation, no labels, no change point).

Ground truth, fixed before any result: the rows whose `changepoint` is 1, by row index. They
mark the edges of the induced transitions, taken from the experiment's schedule (typically at
600, 660, 960 and 1,020 s: the fault starts, its ~60 s transition ends, the reversal starts and
ends), not drawn by eye; 2-4 per file. One annotation set per file.

Methods (one run, each channel detected separately by every method): "zero" (no change);
Lockstep's default `change_points(time, value)`, no other argument, through the user path of
`changepoints_tcpd.py` (a `samples.csv` bundle with each channel as one metric, the row index as
the time in seconds, `lockstep import`, one `lockstep sql` query); ruptures Pelt and Binseg (l2,
`pen = log(n) · σ²`, σ the MAD of first differences / √2 on the standardised channel) and
KernelCPD (rbf, `pen = log(n)`), min_size 2, every sample a candidate (jump 1): the code and
settings of `changepoints_tcpd.py`, imported. A file's channels' points are pooled in time
order, a point within 5 samples of an earlier kept one dropped (`changepoints_klcpd.pool`).

Scoring, fixed before any result: TCPD's F1 (`changepoints_tcpd.f1`) with the one annotation
set, index 0 in both the truth and every prediction, each true point matched by at most one
prediction, at two margins:

  5 samples  the margin of the TCPD and KL-CPD runs (TSSB's minimum), the headline figure;
  30 samples SKAB's own convention: its scoring (NAB, `chp_score(..., window_width="60s",
             anomaly_window_destination="righter")`) credits a detection up to 60 s after a
             true point; at about one row per second a symmetric ±30-sample margin is a window
             of the same width, centred because an offline detector may place a change on either
             side. (±60 would span a whole 60 s transition, both of whose edges are marked.)

and segmentation cover (`changepoints_tcpd.cover`). Means over files with 95 % percentile
bootstrap intervals over files (2000 resamples), per family (valve1, valve2, other) and over all
34 files. SKAB's NAB score is not computed (it scores online detectors' alarms; these methods
are offline segmenters).

The set was never used to choose any parameter, and no method was run on it before: the
defaults are those chosen on TCPD's tune half and synthetic series. One run, reported as it comes.
"""
import argparse
import csv
import hashlib
import json
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import changepoints_tcpd as tcpd  # noqa: E402  (shared scoring, runners and tables)
from changepoints_klcpd import pool  # noqa: E402  (the channel-pooling rule, 5 samples)

FAMILIES = ("valve1", "valve2", "other")
SKIPPED = ("anomaly-free",)
N_CHANNELS = 8
MARGINS = (5, 30)
LABELS = ("anomaly", "changepoint")
COMMIT = "b2c0d46c2971dcbfe71e26087b6d231998bb91c2"
DATA_SHA256 = "b1c50f8920d71284edaece19a1f60e44204eaf107a493d34358f09c31c775f32"
SEED = 19


def data_dir(root):
    return os.path.join(root, "data") if os.path.isdir(os.path.join(root, "data")) else root


def data_files(base):
    """`[(name, family, path, rel)]`: the labelled files, valve1, valve2, other, by number."""
    out = []
    for fam in FAMILIES:
        d = os.path.join(base, fam)
        if not os.path.isdir(d):
            sys.exit(f"{d} is missing: SKAB_DIR must hold SKAB's data/ folder")
        names = [f for f in os.listdir(d) if f.endswith(".csv")]
        for f in sorted(names, key=lambda f: (int(f[:-4]) if f[:-4].isdigit() else 1 << 30, f)):
            out.append((f"{fam}/{f[:-4]}", fam, os.path.join(d, f), f"data/{fam}/{f}"))
    return out


def data_digest(files):
    lines = []
    for _, _, path, rel in sorted(files, key=lambda x: x[3]):
        with open(path, "rb") as fh:
            lines.append(f"{hashlib.sha256(fh.read()).hexdigest()}  {rel}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _float(x):
    try:
        return float(x)
    except ValueError:
        return float("nan")


def load(files):
    """`{name: {"family", "channels": [8 arrays], "columns", "n", "annotations": [[rows]]}}`."""
    series = {}
    for name, fam, path, _ in files:
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh, delimiter=";"))
        header, rows = [h.strip() for h in rows[0]], [r for r in rows[1:] if r]
        if "datetime" not in header or any(lab not in header for lab in LABELS):
            sys.exit(f"{path}: expected the columns datetime, {', '.join(LABELS)}; got {header}")
        cols = [i for i, h in enumerate(header) if h not in ("datetime",) + LABELS]
        if len(cols) != N_CHANNELS:
            sys.exit(f"{path}: {len(cols)} sensor channels, expected {N_CHANNELS}")
        cp = header.index("changepoint")
        truth = [i for i, r in enumerate(rows) if _float(r[cp]) == 1.0]
        series[name] = {
            "family": fam,
            "columns": [header[c] for c in cols],
            "channels": [np.array([_float(r[c]) for r in rows]) for c in cols],
            "n": len(rows),
            "annotations": [truth],
        }
    return series


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("skab")
    ap.add_argument("--lockstep")
    ap.add_argument("--no-ruptures", action="store_true")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--json")
    ap.add_argument("--per-series", action="store_true")
    ap.add_argument("--allow-other-data", action="store_true",
                    help="run on data other than the commit's (mechanical tests on synthetic files only)")
    args = ap.parse_args()
    args.variant = []  # the protocol scores Lockstep's default only (changepoints_tcpd.run_methods)
    return args


def key(name):
    return name.replace("/", "_")


def print_table(title, names, methods, scores, reps, rng):
    """Mean F1 at each margin and cover over `names`, with bootstrap CIs; `scores[m][name]` is
    `(f1 at MARGINS[0], f1 at MARGINS[1], cover, number of changes)`."""
    print(f"### {title}: {len(names)} files\n")
    head = " | ".join(f"F1 ±{mg} | F1 ±{mg} 95 % CI" for mg in MARGINS)
    print(f"| method | {head} | cover | cover 95 % CI | mean changes |")
    print("|---|" + "---:|---|" * (len(MARGINS) + 1) + "---:|")
    for m in methods:
        cells = []
        for j in range(len(MARGINS) + 1):
            v = [scores[m][n][j] for n in names]
            lo, hi = tcpd.boot(v, reps, rng)
            cells.append(f"{np.mean(v):.3f} | {lo:.3f}-{hi:.3f}")
        ks = [scores[m][n][-1] for n in names]
        print(f"| {m} | " + " | ".join(cells) + f" | {np.mean(ks):.1f} |")
    print()


def main():
    t0 = time.time()
    args = parse_args()
    base = data_dir(args.skab)
    files = data_files(base)
    digest = data_digest(files)
    same = digest == DATA_SHA256
    if not same and not args.allow_other_data:
        sys.exit(f"{base}: the {len(files)} files are not SKAB's at commit {COMMIT[:7]} "
                 f"(data sha256 {digest}, expected {DATA_SHA256})")
    series = load(files)
    binary = tcpd.lockstep_binary(args.lockstep)

    # one univariate series per channel, pooled back per file after detection
    flat = {f"{key(name)}.c{c}": {"values": v} for name, s in series.items() for c, v in enumerate(s["channels"])}
    per_channel = tcpd.run_methods(flat, args, binary)
    methods = {m: {name: pool(p for c in range(N_CHANNELS) for p in found[f"{key(name)}.c{c}"])
                   for name in series}
               for m, found in per_channel.items()}

    scores = {m: {} for m in methods}
    for m, found in methods.items():
        for name, s in series.items():
            scores[m][name] = tuple(tcpd.f1(s["annotations"], found[name], mg) for mg in MARGINS) + (
                tcpd.cover(s["annotations"], found[name], s["n"]), len(found[name]))

    groups = {"all SKAB": list(series)}
    for fam in FAMILIES:
        groups[fam] = [n for n, s in series.items() if s["family"] == fam]
    rng = random.Random(SEED)
    counts = ", ".join(f"{fam} {len(groups[fam])}" for fam in FAMILIES)
    print(f"SKAB: {len(series)} files ({counts}), {N_CHANNELS} channels each, "
          f"{sum(len(s['annotations'][0]) for s in series.values())} change points; skipped: "
          f"{', '.join(SKIPPED)}")
    print(f"data sha256 {digest}: " + (f"SKAB at commit {COMMIT[:7]}" if same else
                                        "NOT SKAB's data (--allow-other-data): not a protocol run"))
    print(f"lockstep binary: {binary}\n")
    for g, names in groups.items():
        if names:
            print_table(g, names, methods, scores, args.boot, rng)

    if args.per_series:
        print(f"Per file: F1 ±{MARGINS[0]} / F1 ±{MARGINS[1]} / changes found\n")
        print("| file | n | true | " + " | ".join(methods) + " |")
        print("|---|---:|---:|" + "---:|" * len(methods))
        for name, s in series.items():
            print(f"| {name} | {s['n']} | {len(s['annotations'][0])} | " + " | ".join(
                f"{scores[m][name][0]:.2f}/{scores[m][name][1]:.2f}/{scores[m][name][-1]}" for m in methods) + " |")
        print()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({m: {n: {"f1": v[0], f"f1_{MARGINS[1]}": v[1], "cover": v[2], "found": methods[m][n],
                               "truth": series[n]["annotations"][0]} for n, v in s.items()}
                       for m, s in scores.items()}, fh, indent=1)
    print(f"run time {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
