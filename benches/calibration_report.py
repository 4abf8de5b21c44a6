#!/usr/bin/env python3
"""Reliability of the diagnosis's confidence over evaluation runs, pooled across files.

Usage: benches/calibration_report.py RUNS.csv [RUNS.csv ...]  (target/diagnose_independent_runs*.csv).
For `confidence` (calibrated) and `rule_confidence` (before the mapping): per bin the runs, mean
confidence, observed AC@1 with its 95 % Wilson interval and whether the mean lies inside it; the
Brier score with its binned decomposition (reliability - resolution + uncertainty) and the ECE.
Same bins and formulas as the evaluation test (tests/cli/diagnose/independent.rs).
"""
import csv
import math
import sys

BINS = [(0.0, 0.3), (0.3, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01)]


def wilson(k, n, z=1.96):
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(c - h, 0.0), min(c + h, 1.0)


def table(runs):
    n_all = len(runs)
    overall = sum(ok for _, ok in runs) / n_all
    rel = res = ece = 0.0
    out = ["| confidence | runs | mean confidence | observed AC@1 | 95 % CI | confidence inside |", "|---|---:|---:|---:|---|---|"]
    for lo, hi in BINS:
        b = [(c, ok) for c, ok in runs if lo <= c < hi]
        if not b:
            continue
        n = len(b)
        k = sum(ok for _, ok in b)
        mean = sum(c for c, _ in b) / n
        a, z = wilson(k, n)
        obs = k / n
        rel += n * (mean - obs) ** 2 / n_all
        res += n * (obs - overall) ** 2 / n_all
        ece += n * abs(mean - obs) / n_all
        inside = "yes" if a <= mean <= z else "**no**"
        out.append(f"| {lo:.1f}–{min(hi, 1.0):.1f} | {n} | {mean:.2f} | {k} ({100 * obs:.0f} %) | {100 * a:.0f}–{100 * z:.0f} % | {inside} |")
    brier = sum((c - ok) ** 2 for c, ok in runs) / n_all
    out.append("")
    out.append(
        f"Brier score {brier:.3f} over {n_all} runs (always answering the overall accuracy {overall:.2f}: "
        f"{overall * (1 - overall):.3f}); binned decomposition: reliability {rel:.3f} − resolution {res:.3f} + "
        f"uncertainty {overall * (1 - overall):.3f}; ECE {ece:.3f}"
    )
    return "\n".join(out)


rows = [r for f in sys.argv[1:] for r in csv.DictReader(open(f))]
for column in ("confidence", "rule_confidence"):
    runs = [(float(r[column]), 1 if r["ok1"] == "true" else 0) for r in rows]
    print(f"`{column}`:\n\n{table(runs)}\n")
