#!/usr/bin/env python3
"""Change points on TCPD's held-out series: the eleven real, annotated series of the Turing
Change Point Detection benchmark that no earlier run scored.

  benches/changepoints_tcpd_heldout.py TCPD_DIR [--lockstep BIN] [--no-ruptures]
                                       [--boot 2000] [--json OUT] [--per-series]

TCPD_DIR is a TCPD checkout (github.com/alan-turing-institute/TCPD, commit 83b3039) in which
the ten series TCPD builds from external downloads have been built too, each with the MD5 of
TCPD's `checksums.json` (`python utils/check_checksums.py -c checksums.json -d datasets`
prints `All ok.`); benches/README.md says where their files were found. The held-out series:

- univariate (7): bitcoin, iceland_tourism, measles, ratner_stock, robocalls,
  scanline_126007, scanline_42049;
- multivariate (4): apple (close, volume), bee_waggle_6 (x, y, sin, cos of the heading),
  occupancy (4 sensors), run_log (pace, distance; in the repository, skipped by the univariate
  bench).

Protocol, fixed and committed before the first run (docs/change-points.md, "Held-out TCPD
series"): Lockstep's default `change_points` as frozen since commit b598c5c; "zero" (no
change); ruptures Pelt and Binseg (l2) and KernelCPD (rbf) with the penalties of
benches/changepoints_tcpd.py, every sample a candidate. A multivariate series is detected
channel by channel by every method, and the channels' points are pooled, a point within 5
samples of an earlier kept one dropped (benches/changepoints_klcpd.py's rule). Scoring is
TCPD's F1 (5-sample margin, five annotators) and cover, means over series with 95 %
bootstrap intervals. Nothing is chosen on these series: one run, reported as it comes.

The run also scores the 26 univariate real series scored before (tune and eval halves), so
that the last table is the benchmark's 37 real series (the five quality-control series are
synthetic and left out).
"""
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import changepoints_tcpd as tcpd  # noqa: E402  (shared scoring, runners and tables)
from changepoints_klcpd import pool  # noqa: E402

UNIVARIATE = ["bitcoin", "iceland_tourism", "measles", "ratner_stock", "robocalls", "scanline_126007",
              "scanline_42049"]
MULTIVARIATE = ["apple", "bee_waggle_6", "occupancy", "run_log"]


def load(root):
    """Every real series of the checkout: `{name: {"channels": [...], "annotations": [...], "n"}}`."""
    import json

    ann = json.load(open(os.path.join(root, "annotations.json")))
    out = {}
    for name in sorted(ann):
        if name.startswith("quality_control"):
            continue
        path = os.path.join(root, "datasets", name, f"{name}.json")
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            sys.exit(f"{path} is missing: build the held-out series first (see the module doc)")
        d = json.load(open(path))
        channels = [np.array([np.nan if v is None else float(v) for v in s["raw"]]) for s in d["series"]]
        out[name] = {"channels": channels, "annotations": [list(v) for v in ann[name].values()], "n": d["n_obs"]}
    return out


def main():
    args = tcpd.parse_args(__doc__, "tcpd")
    if args.variant:
        sys.exit("--variant is not taken here: the protocol scores the default only")
    series = load(args.tcpd)
    missing = [n for n in UNIVARIATE + MULTIVARIATE if n not in series]
    if missing:
        sys.exit(f"held-out series missing from the checkout: {missing}")
    binary = tcpd.lockstep_binary(args.lockstep)
    flat = {}
    for name, s in series.items():
        for c, v in enumerate(s["channels"]):
            flat[name if len(s["channels"]) == 1 else f"{name}.c{c}"] = {"values": v}
    per_channel = tcpd.run_methods(flat, args, binary)
    methods = {}
    for m, found in per_channel.items():
        methods[m] = {}
        for name, s in series.items():
            keys = [name] if len(s["channels"]) == 1 else [f"{name}.c{c}" for c in range(len(s["channels"]))]
            methods[m][name] = pool(p for k in keys for p in found[k]) if len(keys) > 1 else found[name]

    scores = {m: {} for m in methods}
    for m, found in methods.items():
        for name, s in series.items():
            scores[m][name] = (tcpd.f1(s["annotations"], found[name]), tcpd.cover(s["annotations"], found[name], s["n"]),
                               len(found[name]))

    before = sorted(n for n in series if n not in UNIVARIATE + MULTIVARIATE)
    groups = {
        "held-out univariate": UNIVARIATE,
        "held-out multivariate (channels pooled)": MULTIVARIATE,
        "all held-out": UNIVARIATE + MULTIVARIATE,
        "scored before (tune and eval halves)": before,
        "all real TCPD series": sorted(series),
    }
    rng = random.Random(18)
    print(f"TCPD real series: {len(series)} ({len(UNIVARIATE) + len(MULTIVARIATE)} held out)")
    print(f"lockstep binary: {binary}\n")
    for g, names in groups.items():
        tcpd.print_table(g, names, methods, scores, args.boot, rng)
    rows = [(n, ["held out" if n in UNIVARIATE + MULTIVARIATE else tcpd.half(n), len(series[n]["channels"])])
            for n in UNIVARIATE + MULTIVARIATE + before]
    tcpd.report_series(args, methods, scores, ["set", "channels"], rows)


if __name__ == "__main__":
    main()
