"""Reproduce the figures of the study: ``tiedattention reproduce NAME --out DIR [--quick]``.

Each figure is a module (:data:`FIGURES`) that says which cells it needs (theory curves, simulations,
thresholds), tidies the computed cells into the plotted data, and draws it (see :mod:`.common`). The cells
are computed by the sweep machinery into ``DIR/store``: an interrupted run resumes without recomputing what
is finished. The outputs are ``DIR/<name>.png``, ``DIR/<name>.pdf`` and ``DIR/<name>.parquet`` (the plotted
data), each written atomically.

    from tiedattention.reproduce import reproduce
    result = reproduce("fig1", "out/figs", quick=True)   # result.paths: the PNG, PDF and Parquet written
    redraw("out/figs/fig1.parquet", "out/figs")           # the PNG and PDF again from the Parquet, no computing

fig7-fig10 are the power-law figures of the study (sequential recovery, emergence, scaling law, error
decomposition); their routes and the finite-d definition of a detached eigenvalue are in :mod:`.powerlaw`.
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import ParameterError

__all__ = ["FIGURES", "figure_module", "reproduce", "redraw", "FigureResult"]

#: figure name -> module (relative to this package) and one line on what it shows
FIGURES: dict[str, str] = {
    "fig1": "learning curve with learned spectra, and the rank of the minimiser vs alpha",
    "fig2": "test and train error for lambda = 1e-2 ... 1e-5 and lambda -> 0+: the interpolation peak",
    "fig3": "factorised vs direct (ridge) student at the best lambda, and the threshold diagram vs kappa0",
    "fig4": "seq2seq vs seq2lab",
    "fig5": "temperature beta = beta0 in {0.5, 1, 2}",
    "fig6": "number of tokens T in {2, 3, 5} against alpha_bar",
    "fig7": "power-law target: sequential recovery (outliers of S_hat, overlaps, k* vs alpha)",
    "fig8": "power-law target: emergence steps of the test error at each mode's detachment",
    "fig9": "power-law target: scaling law of the excess test error with fitted exponents",
    "fig10": "power-law target: error decomposition E_over / E_under / E_approx / E_mismatch vs alpha",
}


def figure_module(name: str) -> ModuleType:
    """The module of a figure; ParameterError("name") for an unknown one."""
    if name not in FIGURES:
        raise ParameterError("name", f"unknown figure {name!r} (known: {', '.join(FIGURES)}, all)")
    return importlib.import_module(f"{__name__}.{name}")


@dataclass
class FigureResult:
    name: str
    paths: list[Path]
    cells: int = 0
    computed: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _draw_files(mod: ModuleType, name: str, data: Any, quick: bool, out: Path, formats: tuple[str, ...]) -> list[Path]:
    """Draw the figure from its tidy data and write ``out/<name>.<format>`` for each format (atomically)."""
    from . import common

    plt = common.pyplot(paper=True)  # (the figure's own style: each draw() sets it too)
    fig = mod.draw(data, quick)
    paths = []
    try:
        for ext in formats:
            path = out / f"{name}.{ext}"
            common.atomic_write(path, lambda p, ext=ext: fig.savefig(p, format=ext, bbox_inches="tight"))
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


def redraw(parquet: str | Path, out: str | Path, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Redraw a figure from the plotted data ``reproduce`` wrote (``<name>.parquet``: its ``figure`` and ``quick``
    columns say which figure, in which mode) into ``out/<name>.png`` / ``.pdf``, computing nothing: how the
    gallery's PNGs are redrawn after a change of style. Returns the paths written."""
    import pandas as pd

    data = pd.read_parquet(parquet)
    if "figure" not in data.columns or data.empty:
        raise ParameterError("parquet", f"{parquet} is not a figure's plotted data (no 'figure' column)")
    name = str(data["figure"].iloc[0])
    return _draw_files(figure_module(name), name, data, bool(data["quick"].all()), Path(out), formats)


def _say(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, highlight=False).print(message, markup=False, soft_wrap=True)


def reproduce(
    name: str,
    out: str | Path,
    quick: bool = False,
    workers: int | None = None,
    executor: Any = "local",
    progress: bool = True,
    max_stages: int = 4,
) -> FigureResult:
    """Compute (or reuse) the cells of figure ``name`` in ``out/store`` and write its PNG, PDF and Parquet.

    Raises :class:`~tiedattention.sweep.SweepInterrupted` on Ctrl-C (finished cells are kept) and
    RuntimeError when cells failed (they are not stored; running again retries them).
    """
    from ..sweep import Store, run_sweep
    from ..sweep.store import store_error
    from . import common

    mod = figure_module(name)
    out = Path(out)
    try:
        store = Store(out / "store")
    except OSError as exc:
        raise store_error(out / "store", exc, "out") from None
    t0 = time.perf_counter()
    result = FigureResult(name, [])
    table = None
    asked: set[str] = set()
    for stage in range(max_stages):
        cells = mod.build(quick, table)
        keys = {c.key for c in cells}
        if stage > 0 and keys <= asked:
            break
        asked |= keys
        spec = common.spec_of(name, cells)
        done = len(keys & store.done_keys())
        _say(f"{name}: {len(cells)} cells ({done} already in {store.root}), {mod.TITLE}")
        try:
            summary = run_sweep(spec, store, executor=executor, max_workers=workers, progress=progress)
        except ParameterError as exc:  # the store is reproduce's out/store
            raise ParameterError("out" if exc.param == "store" else exc.param, exc.message) from None
        result.cells = len(asked)
        result.computed += summary.computed
        if summary.failures:
            by_key = {c.key: c for c in cells}
            lines = []
            for k, msg in summary.failures.items():
                prm = by_key[k].params
                what = ", ".join(f"{n}={prm[n]}" for n in ("model", "lam", "tokens", "beta", "task", "alpha", "alphas")
                                 if n in prm)
                lines.append(f"{by_key[k].route} ({what}): {msg}")
            raise RuntimeError(f"{name}: {summary.failed} cells failed (rerun to retry them):\n  " + "\n  ".join(lines))
        table = summary.table()
    data = mod.tidy(table, quick)
    data.insert(0, "figure", name)
    data["quick"] = bool(quick)
    paths = _draw_files(mod, name, data, quick, out, ("png", "pdf"))
    path = out / f"{name}.parquet"
    common.atomic_write(path, lambda p: data.to_parquet(p, index=False))
    paths.append(path)
    bad = data[(data["kind"] == "simulation") & (data.get("converged_fraction", 1.0) < 1)] \
        if "converged_fraction" in data else data.iloc[:0]
    if len(bad):
        result.notes.append(f"{len(bad)} simulation points where not every seed met the solver's stop rule")
    theory = common.theory_frame(table)
    if not theory.empty and not theory["converged"].astype(bool).all():
        off = theory[~theory["converged"].astype(bool)]
        where = ", ".join(f"{r.alpha:g} ({r.model}, lam={r.lam:g}, T={int(r.tokens)})" for r in off.itertuples())
        result.notes.append(f"state evolution did not converge at alpha = {where}; those points are not drawn")
    result.paths = paths
    result.seconds = time.perf_counter() - t0
    for note in result.notes:
        _say(f"{name}: note: {note}")
    _say(f"{name}: wrote {', '.join(str(p) for p in paths)} in {result.seconds:.0f} s "
         f"({result.computed} of {result.cells} cells computed now)")
    sys.stderr.flush()
    return result
