#!/usr/bin/env python3
"""Python side of benches/analysis_vs_python.rs: the same work with numpy/scipy and ruptures.

Reads the series the Rust benchmark wrote (raw little-endian f64, one series after another)
and prints one JSON object on stdout: wall time of the computation only (data already in
memory), per-series results for the agreement check, and package versions.

  analysis_vs_python.py lag DIR PAIRS LEN MAX_LAG
      scipy.signal.correlate(zy, zx) / n + correlation_lags, best |coef| within +-MAX_LAG.
  analysis_vs_python.py cp DIR SERIES LEN KERNEL_SAMPLE PELT_SAMPLE
      ruptures KernelCPD(rbf) (C implementation) on the first KERNEL_SAMPLE series and
      ruptures Pelt(model="rank", jump=5) on the first PELT_SAMPLE series (pure Python, slow).
"""
import json
import sys
import time

import numpy as np


def lag(d, pairs, n, max_lag):
    import scipy
    from scipy.signal import correlate, correlation_lags

    x = np.fromfile(f"{d}/lag_x.f64", dtype="<f8").reshape(pairs, n)
    y = np.fromfile(f"{d}/lag_y.f64", dtype="<f8").reshape(pairs, n)
    lags_out, coefs = [], []
    lags = correlation_lags(n, n, mode="full")
    window = np.abs(lags) <= max_lag
    wl = lags[window]
    t0 = time.perf_counter()
    for p in range(pairs):
        zx = (x[p] - x[p].mean()) / x[p].std()
        zy = (y[p] - y[p].mean()) / y[p].std()
        c = correlate(zy, zx, mode="full", method="auto")[window] / n
        i = int(np.argmax(np.abs(c)))
        lags_out.append(int(wl[i]))
        coefs.append(float(c[i]))
    secs = time.perf_counter() - t0
    print(json.dumps({"seconds": secs, "lags": lags_out, "coefs": coefs,
                      "numpy": np.__version__, "scipy": scipy.__version__}))


def cp(d, series, n, kernel_sample, pelt_sample):
    import ruptures as rpt

    v = np.fromfile(f"{d}/cp.f64", dtype="<f8").reshape(series, n)
    out = {"ruptures": rpt.__version__, "numpy": np.__version__}
    pen_rank = 2.33 * np.log(n)

    def run(name, count, algo):
        found = []
        t0 = time.perf_counter()
        for s in range(count):
            bk = algo(v[s].reshape(-1, 1))
            found.append([int(b) for b in bk[:-1]])
        out[name] = {"series": count, "seconds": time.perf_counter() - t0, "found": found}

    run("kernel_rbf", kernel_sample,
        lambda s: rpt.KernelCPD(kernel="rbf", min_size=5).fit(s).predict(pen=np.log(n)))
    run("pelt_rank", pelt_sample,
        lambda s: rpt.Pelt(model="rank", min_size=5, jump=5).fit(s).predict(pen=pen_rank))
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "lag":
        lag(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        cp(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
