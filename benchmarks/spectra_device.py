"""Simulations for the spectra checks (issue 3), run once on a GPU box; the theory side is compared offline.

Writes $OUT/spectra_sims.json (and .npz with the raw spectra). Usage: OUT=dir python3 benchmarks/spectra_device.py
[--small] (``--small``: tiny sizes on CPU, to test the script). Every part is timed and written as it finishes.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch

from tiedattention.problem import Problem
from tiedattention.simulation import sample_dataset, simulate_record, train

SMALL = "--small" in sys.argv
CPU = "--cpu" in sys.argv  # CPU profile: the same checks, the heaviest points last (mp alpha=4) or smaller
DEV = "cpu" if SMALL or not torch.cuda.is_available() else "cuda"
OUT = os.environ.get("OUT", "/tmp")
RES: dict = {"device": DEV, "torch": torch.__version__}
ARR: dict = {}


def save():
    with open(os.path.join(OUT, "spectra_sims.json"), "w") as fh:
        json.dump(RES, fh, indent=1, default=float)
    np.savez_compressed(os.path.join(OUT, "spectra_sims.npz"), **ARR)


def part(name, fn):
    t0 = time.time()
    try:
        fn()
        RES.setdefault("seconds", {})[name] = time.time() - t0
    except Exception as exc:  # keep going: report what failed
        RES.setdefault("errors", {})[name] = repr(exc)
    print(name, f"{time.time() - t0:.1f}s", flush=True)
    save()


def keep(rec):
    return {k: v for k, v in rec.items() if k not in ("eigenvalues", "singular_values")}


ALPHAS_MP = (0.1, 0.5) if CPU else (0.1, 0.5, 4.0)


def mp_spectra():
    d, seeds = (40, 2) if SMALL else (200, 4)
    p = Problem.from_options(target="mp:0.5", noise=0.5, lam=0.01, tokens=2)
    for a in ALPHAS_MP:
        rec = simulate_record(p, a, d, seeds=seeds, solver="prox", device=DEV, return_spectra=True)
        RES[f"mp_a{a}"] = keep(rec)
        ARR[f"mp_a{a}_ev"] = np.asarray(rec["eigenvalues"])
        ARR[f"mp_a{a}_sv"] = np.asarray(rec["singular_values"])
        save()


def narrow():
    d, seeds = (30, 2) if SMALL else (100, 8)
    p = Problem.from_options(target="mp:0.5", kappa=0.25)
    for solver in ("prox",) if CPU else ("prox", "adam"):
        for a in (0.1, 0.5, 4.0):
            rec = simulate_record(p, a, d, seeds=seeds, solver=solver, device=DEV, return_spectra=True)
            RES[f"narrow_{solver}_a{a}"] = keep(rec)
            save()


def direct():
    d, seeds = (30, 2) if SMALL else (100, 8)
    p = Problem.from_options(target="mp:0.5", model="direct")
    for a in (0.1, 0.5, 2.0):
        rec = simulate_record(p, a, d, seeds=seeds, solver="prox", device=DEV)
        RES[f"direct_a{a}"] = keep(rec)
        save()


def spikes():
    d, seeds = (40, 1) if SMALL else (400, 3)
    for spec in ("spikes:4,2.5,1.5", "spikes:10,8,6.5+mp:0.2"):
        p = Problem.from_options(target=spec, noise=0.5, lam=0.01)
        for a in (0.02, 0.1) if CPU else (0.02, 0.1, 0.5):
            rows = []
            for s in range(seeds):
                data = sample_dataset(p, max(1, int(round(a * d * d))), d, s)
                S0 = data.S0 if hasattr(data, "S0") else None
                tr = train(p, data, solver="prox", device=DEV, seed=s)
                e, v = np.linalg.eigh(tr.S_hat)
                e0, v0 = np.linalg.eigh(S0)
                top = [float(x) for x in e[::-1][:3]]
                ov = [float((v[:, -1 - i] @ v0[:, -1 - i]) ** 2) for i in range(3)]
                rows.append({"top": top, "overlap": ov, "rank": float(np.mean(e > 1e-6 * max(e.max(), 1e-300))),
                             "converged": bool(tr.converged), "steps": int(tr.steps)})
            RES[f"{spec}_a{a}"] = rows
            save()


def mp_large_alpha():
    global ALPHAS_MP
    ALPHAS_MP = (4.0,)
    mp_spectra()


if __name__ == "__main__":
    parts = [("mp_spectra", mp_spectra), ("direct", direct), ("spikes", spikes), ("narrow", narrow)]
    if CPU:
        parts.append(("mp_large_alpha", mp_large_alpha))
    for name, fn in parts:
        part(name, fn)
