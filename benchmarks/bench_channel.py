"""Benchmark of theory/channel.py: milliseconds per SoftmaxChannel.moments call and achieved accuracy.

Accuracy: GH (T=2) against a high-order reference (order 40); QMC (T>=3) is the replica error estimate
(std over scramblings / sqrt(replicas)); T >= 3 also times a warm-started call (``warm=``, starts from the
minimisers of a call at a point 1-2 % away, as between SE iterations). T = 2 is timed with the
symmetry-folded rule (default) and, as the baseline, the plain tensor rule (``symmetric=False``, the
pre-fold path; same values to round-off).
Run: .venv/bin/python benchmarks/bench_channel.py [--quick]   (--quick: T = 2 only)
"""

from __future__ import annotations

import sys
import time

from tiedattention.theory.channel import ChannelParams, SoftmaxChannel

KEYS = ("q_hat", "m_hat", "sigma_hat")
SIGMAS = (0.0, 0.05, 1.0, 10.0)


def timed(ch, *args, repeat=3):
    ch.moments(*args)  # warm the node cache
    t = time.perf_counter()
    for _ in range(repeat):
        r = ch.moments(*args)
    return r, (time.perf_counter() - t) / repeat * 1e3


def main(quick: bool = False) -> None:
    point = dict(alpha=1.0, q=1.0, m=0.8)
    for T in (2,) if quick else (2, 3, 5):
        p = ChannelParams(tokens=T, beta=1.0, beta0=1.0, noise=0.5, noise_out=0.0, q0=1.5)
        if T == 2:
            configs = [
                ("order 16 + est", dict()),
                ("order 12 no est", dict(order=12, estimate_error=False)),
                ("baseline 16+est", dict(symmetric=False)),
                ("baseline 12", dict(order=12, estimate_error=False, symmetric=False)),
            ]
            ref = SoftmaxChannel(p, order=40, estimate_error=False)
        else:
            configs, ref = [("QMC 4x2^12", dict()), ("QMC 4x2^11", dict(qmc_log2=11))], None
        for label, opts in configs:
            ch = SoftmaxChannel(p, **opts)
            for sigma in SIGMAS:
                args = (point["alpha"], point["q"], point["m"], sigma)
                r, ms = timed(ch, *args, repeat=3 if T < 5 else 1)
                if ref is not None:
                    rr = ref.moments(*args)
                    acc = max(abs(getattr(r, k) / getattr(rr, k) - 1) for k in KEYS)
                    what = "rel. error vs order 40"
                else:
                    acc = max(r.error_estimate[k] / abs(getattr(r, k)) for k in KEYS)
                    what = "rel. QMC error estimate"
                est = max(r.error_estimate[k] / abs(getattr(r, k)) for k in KEYS)
                print(
                    f"T={T} {label:16s} nodes={ch.n_nodes:6d} sigma={sigma:5.2f}: {ms:8.1f} ms/call, "
                    f"{what} {acc:.1e} (built-in estimate {est:.1e}), newton its {r.prox_iterations}",
                    flush=True,
                )
                if T > 2 and sigma > 0:  # warm start from a call at a nearby point (as in the SE iterations)
                    warm: dict = {}
                    ch.moments(args[0], 1.01 * args[1], 1.01 * args[2], 1.02 * sigma, warm=warm)
                    t = time.perf_counter()
                    rw = ch.moments(*args, warm=warm)
                    mw = (time.perf_counter() - t) * 1e3
                    dev = max(abs(getattr(rw, k) / getattr(r, k) - 1) for k in KEYS)
                    print(f"T={T} {label:16s} warm start      sigma={sigma:5.2f}: {mw:8.1f} ms/call "
                          f"({ms / mw:.1f}x), newton its {rw.prox_iterations}, |warm/cold - 1| {dev:.1e}", flush=True)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
