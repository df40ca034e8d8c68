"""Regression tests from the session-11 review of `tiedattention simulate` and `tiedattention.simulation`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tiedattention import Problem
from tiedattention.simulation import sample_dataset, train


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("model,kappa", [("direct", 1.0), ("factorized", 1.0), ("factorized", 2.0)])
def test_lbfgs_sees_the_objective_in_float64(model, kappa):
    """L-BFGS handed torch's LBFGS a float32 copy of the objective (torch.tensor(F) of a Python float), so it could
    not see changes below ~1e-7 relative and stopped there with converged=True. In float64 it reaches the prox
    minimiser (a smooth, well-conditioned problem at lam = 0.01) to far better than that."""
    pb = Problem.from_options(lam=0.01, model=model, kappa=kappa)
    data = sample_dataset(pb, n=200, d=20, rng_or_seed=1)
    ref = train(pb, data, solver="prox", seed=1, rtol=1e-15)
    res = train(pb, data, solver="lbfgs", seed=1)
    assert res.converged
    gap = (res.objective - ref.objective) / ref.objective
    assert -1e-12 < gap < 1e-8, gap  # float32: 1.0e-7 (direct), 1.1e-7 (factorised)
    assert np.linalg.norm(res.S_hat - ref.S_hat) / np.linalg.norm(ref.S_hat) < 1e-4


def _cli():
    from typer.testing import CliRunner

    from tiedattention.cli import app

    return CliRunner(), app


BASE = ["simulate", "--d", "8", "--seeds", "2", "--n-test", "50", "--solver", "prox", "--threads", "1"]


def test_ctrl_c_keeps_the_finished_records_and_writes_no_partial_file(tmp_path, monkeypatch):
    """Ctrl-C in a multi-alpha run: exit 130 with one line saying how many records finished, the finished ones
    shown, and no half-finished --out / --save-spectra file (before: rc 130, nothing printed at all)."""
    import tiedattention.simulation as sim

    real, calls = sim.simulate_record, []

    def interrupted_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sim, "simulate_record", interrupted_on_the_second)
    runner, app = _cli()
    spec = tmp_path / "s.npz"
    res = runner.invoke(app, [*BASE, "--alpha", "0.5,1,2", "--json", "--save-spectra", str(spec)])
    assert res.exit_code == 130, res.output
    lines = [json.loads(x) for x in res.stdout.strip().splitlines()]
    assert [r["alpha"] for r in lines] == [0.5]
    assert "interrupted; 1 of 3 (α, d) records finished" in res.stderr
    assert "nothing written to --save-spectra" in res.stderr
    assert list(tmp_path.iterdir()) == []
    calls.clear()
    res = runner.invoke(app, [*BASE, "--alpha", "0.5,1,2"])  # the table of what finished
    assert res.exit_code == 130 and "│ 0.5 │" in res.stdout and "│   1 │" not in res.stdout


@pytest.mark.parametrize("option,name", [("--save-spectra", "s.npz"), ("--out", "f.png")])
def test_an_unwritable_output_directory_is_refused_before_training(tmp_path, monkeypatch, option, name):
    """A directory that exists but cannot be written (read-only file system, no permission) used to be found out
    by a traceback after the whole run; now it is one line and exit 2 before any training."""
    import tempfile

    import tiedattention.simulation as sim

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    def never(*args, **kwargs):
        raise AssertionError("trained before checking the output")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(sim, "simulate_record", never)
    runner, app = _cli()
    res = runner.invoke(app, [*BASE, "--alpha", "0.5", option, str(tmp_path / name)])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"error: {option}: cannot write to directory '{tmp_path}': Permission denied"


def test_gamp_on_seq2seq_is_refused_before_any_work(monkeypatch):
    """GAMP is seq2lab only: the CLI used to find out at the first seed, after solving the SE of --theory."""
    import tiedattention.theory.api as theory_api

    def never(*args, **kwargs):
        raise AssertionError("solved the SE before refusing the solver")

    monkeypatch.setattr(theory_api, "theory_records", never)
    runner, app = _cli()
    res = runner.invoke(app, [*BASE[:-4], "--solver", "gamp", "--task", "seq2seq", "--alpha", "0.5", "--theory"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == "error: --task: GAMP is implemented for seq2lab (its loss is a function of the logits)"


def test_api_misuse_names_the_parameter():
    """Python API inputs that used to pass silently (data of another T trained as if it were the problem's; a NaN
    or non-symmetric S0 giving NaN / inconsistent labels) or fail deep inside (TypeError on None, numpy's
    'expected non-negative integer', torch's set_num_threads) now raise ParameterError naming the parameter."""
    from tiedattention.errors import ParameterError
    from tiedattention.simulation import simulate_record

    pb = Problem.from_options()
    data = sample_dataset(pb, 20, 6, 0)
    cases = [
        ("data", lambda: train(Problem.from_options(tokens=3), data, solver="prox")),
        ("data", lambda: train(Problem.from_options(task="seq2seq"), data, solver="prox")),
        ("S0", lambda: sample_dataset(pb, 5, 6, 0, S0=np.full((6, 6), np.nan))),
        ("S0", lambda: sample_dataset(pb, 5, 6, 0, S0=np.triu(np.ones((6, 6))))),
        ("seed0", lambda: simulate_record(pb, 0.5, 6, seeds=1, seed0=-1, solver="prox")),
        ("seed", lambda: sample_dataset(pb, 5, 6, -1)),
        ("threads", lambda: simulate_record(pb, 0.5, 6, seeds=1, solver="prox", threads=0)),
        ("rank_tol", lambda: simulate_record(pb, 0.5, 6, seeds=1, solver="prox", rank_tol=-1.0)),
    ]
    for name, call in cases:
        with pytest.raises(ParameterError) as exc:
            call()
        assert exc.value.param == name


@pytest.mark.parametrize("noise,beta0", [(0.5, 1.0), (0.0, 2.0)])
def test_uniform_attention_test_error_by_a_second_route(noise, beta0):
    """S_hat = 0 predicts uniform attention 1/T. At T = 2 its test error is 4 E(sigmoid(beta0 z) - 1/2)^2 with
    z = h11 - h12 + noise, and given x1 the law of z is exactly Gaussian at finite d:
    N((x1^T S0 x1 - Tr S0)/sqrt(d), |S0 x1|^2/d + 1.5 Delta) (the noise, if any, only in the noisy label).
    Integrating that 1-D Gaussian by Gauss-Hermite over fresh x1 is a second route to the sampler's trace
    removal, noise covariance and beta0; as d grows both approach the d -> infinity value (Gaussian z of variance
    3 Q0 + 1.5 Delta), about 0.44 in the reference setting (THEORY.md section 3)."""
    from tiedattention.simulation import rng_for, test_errors

    pb = Problem.from_options(noise=noise, beta0=beta0)
    d, n_test = 40, 20000
    S0 = pb.task.target.sample(d, rng_for(0, "target"))
    sim = test_errors(pb, np.zeros((d, d)), S0, seed=0, n_test=n_test)
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    weights = weights / weights.sum()
    x1 = np.random.default_rng(7).standard_normal((n_test, d))
    mean = (np.einsum("ni,ij,nj->n", x1, S0, x1) - np.trace(S0)) / np.sqrt(d)
    Q0 = float((S0 * S0).sum() / d)
    limit = {}
    for kind, extra in (("test_error", 1.5 * noise), ("test_error_clean", 0.0)):
        sd = np.sqrt(((x1 @ S0) ** 2).sum(axis=1) / d + extra)
        z = mean[:, None] + sd[:, None] * nodes[None, :]
        per = 4 * ((1 / (1 + np.exp(-beta0 * z)) - 0.5) ** 2 @ weights)
        second, second_sem = per.mean(), per.std(ddof=1) / np.sqrt(n_test)
        tol = 4 * np.hypot(sim[f"{kind}_sem"], second_sem)
        assert abs(sim[kind] - second) < tol, (kind, sim[kind], second, tol)
        z = np.sqrt(3 * Q0 + extra) * nodes
        limit[kind] = float(4 * ((1 / (1 + np.exp(-beta0 * z)) - 0.5) ** 2 @ weights))
        assert abs(sim[kind] - limit[kind]) < 1.0 / d  # the finite-d logits' fourth cumulant: O(1/d)
    if noise == 0.5 and beta0 == 1.0:  # the reference value, at the limit's Q0 = 1 + kappa0 = 1.5
        z = np.sqrt(3 * 1.5 + 1.5 * noise) * nodes
        assert float(4 * ((1 / (1 + np.exp(-z)) - 0.5) ** 2 @ weights)) == pytest.approx(0.44, abs=0.005)


@pytest.mark.parametrize("design", ["gaussian", "rank_one"])
def test_control_designs_refuse_a_bad_alpha(design):
    """gaussian_design_seed / rank_one_design_seed trained alpha = -1 or 0 as n = 1 sequence (max(1, round(...)))
    and failed on NaN with int()'s ValueError; alpha is now validated like simulate_record's."""
    from tiedattention.errors import ParameterError
    from tiedattention.simulation.gaussian_design import gaussian_design_seed
    from tiedattention.simulation.rank_one_design import rank_one_design_seed

    fn = gaussian_design_seed if design == "gaussian" else rank_one_design_seed
    pb = Problem.from_options()
    for alpha in (-1.0, 0.0, float("nan"), 1e-6):
        with pytest.raises(ParameterError) as exc:
            fn(pb, alpha, 8, 0, n_test=100)
        assert exc.value.param == "alpha"
    with pytest.raises(ParameterError) as exc:
        fn(pb, 0.5, 8, 0, n_test=1)
    assert exc.value.param == "n_test"


def test_spectra_keep_one_row_per_seed_when_a_seed_fails():
    """A seed whose solution is not finite had no spectrum row, so ``eigenvalues`` had fewer rows than seeds (rows
    shifted against the ``seeds`` array of --save-spectra, and np.stack over alphas failed): it now gets a NaN row."""
    from tiedattention.simulation import SOLVERS, Solution, register_solver, simulate_record

    calls = []

    def nan_on_second_seed(problem, obj, *, seed, callback=None, **kw):
        calls.append(seed)
        d = obj.d
        S = torch.full((d, d), float("nan"), dtype=torch.float64) if seed == 1 else torch.eye(d, dtype=torch.float64)
        return Solution(S, None, 1, True, "test")

    register_solver("nan-second", nan_on_second_seed)
    try:
        pb = Problem.from_options()
        rec = simulate_record(pb, 0.5, 6, seeds=3, solver="nan-second", n_test=10, return_spectra=True)
    finally:
        SOLVERS.pop("nan-second")
    assert calls == [0, 1, 2]
    ev, sv = rec["eigenvalues"], rec["singular_values"]
    assert ev.shape == (3, 6) and sv.shape == (3, 6)
    assert np.isnan(ev[1]).all() and np.isnan(sv[1]).all()
    np.testing.assert_allclose(ev[[0, 2]], 1.0)
    assert rec["converged"] == pytest.approx(2 / 3)


def test_unregistered_gamp_says_how_to_register_it():
    """From Python, solver="gamp" needs tiedattention.amp.register() (simulation cannot import the theory's
    channel); the error said only 'unknown solver'."""
    from tiedattention.errors import ParameterError
    from tiedattention.simulation import SOLVERS, simulate_record

    saved = SOLVERS.pop("gamp", None)
    try:
        with pytest.raises(ParameterError, match=r"tiedattention\.amp\.register\(\)"):
            simulate_record(Problem.from_options(), 0.5, 6, seeds=1, solver="gamp")
        with pytest.raises(ParameterError, match=r"tiedattention\.amp\.register\(\)"):
            train(Problem.from_options(), sample_dataset(Problem.from_options(), 10, 6, 0), solver="gamp")
    finally:
        if saved is not None:
            SOLVERS["gamp"] = saved


def test_ctrl_c_during_the_theory_says_so(monkeypatch):
    import tiedattention.theory.api as theory_api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(theory_api, "theory_records", interrupted)
    runner, app = _cli()
    res = runner.invoke(app, [*BASE, "--alpha", "0.5", "--theory"])
    assert res.exit_code == 130
    assert res.stderr.strip() == ("simulate: interrupted while solving the state evolution of --theory "
                                  "(before any training)")


def test_an_unconverged_se_is_marked_in_the_table(monkeypatch):
    """--theory printed an SE that did not converge like any other number (the JSON had se_converged: false, the
    table nothing): now '?' on SE and z, a caption note and one warning line."""
    import tiedattention.theory.api as theory_api

    real = theory_api.theory_records

    def unconverged(*args, **kwargs):
        return [{**r, "converged": False} for r in real(*args, **kwargs)]

    monkeypatch.setattr(theory_api, "theory_records", unconverged)
    runner, app = _cli()
    res = runner.invoke(app, [*BASE, "--alpha", "0.5", "--theory"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    row = next(line for line in res.stdout.splitlines() if line.startswith("│ 0.5"))
    assert row.count("?") == 2
    assert "?: the SE did not converge there" in " ".join(res.stdout.split())
    assert "warning: the state evolution of --theory did not converge at α = 0.5" in res.stderr


@pytest.mark.parametrize("solver,expected", [("adam", True), ("prox", True), ("gamp", False)])
def test_a_long_seed_shows_its_steps(monkeypatch, solver, expected):
    """A seed could run for hours with nothing moving (Adam at lambda -> 0 below the interpolation threshold runs
    to --max-steps); the CLI now hands the free per-step callbacks of adam/lbfgs/prox to the progress bar (not
    gamp's, which costs a pass over the data)."""
    import tiedattention.simulation as sim

    real, seen = sim.simulate_record, []

    def spy(*args, **kwargs):
        seen.append(kwargs.get("callback"))
        if kwargs.get("callback") is not None:
            kwargs["callback"](1, 0.5, 1.0)  # what a solver calls; must not fail
        return real(*args, **kwargs)

    monkeypatch.setattr(sim, "simulate_record", spy)
    runner, app = _cli()
    res = runner.invoke(app, [*BASE[:-4], "--solver", solver, "--alpha", "0.5", "--json"])
    assert res.exit_code == 0, res.output
    assert (seen[0] is not None) == expected


def test_test_errors_stream_their_sequences():
    """test_errors sampled all n_test sequences at once (n_test = 2e5 at d = 100: 400 MB peak); it now goes chunk
    by chunk through iter_dataset, whose chunks are exactly sample_dataset's numbers, so the errors are unchanged."""
    import tracemalloc

    from tiedattention.simulation import rng_for, test_errors
    from tiedattention.simulation.metrics import _per_sequence_losses
    from tiedattention.simulation.sampler import iter_dataset

    for opts in ({}, {"task": "seq2seq", "noise_out": 0.1, "tokens": 3}):
        pb = Problem.from_options(**opts)
        d = 10
        S0 = pb.task.target.sample(d, rng_for(0, "target"))
        whole = sample_dataset(pb, 5000, d, 0, S0=S0, purpose="test", keep_outputs=pb.task.task == "seq2seq")
        parts = list(iter_dataset(pb, 5000, d, 0, S0=S0, purpose="test", chunk=777,
                                  keep_outputs=pb.task.task == "seq2seq"))
        for key in ("X", "y", "clean", "gram", "out_cross", "out_sq", "Y"):
            if getattr(whole, key) is not None:
                np.testing.assert_array_equal(getattr(whole, key), np.concatenate([getattr(p, key) for p in parts]))
        noisy, clean = _per_sequence_losses(pb, 0.5 * S0, whole)
        got = test_errors(pb, 0.5 * S0, S0, 0, n_test=5000)
        assert got["test_error"] == pytest.approx(noisy.mean(), rel=1e-13)
        assert got["test_error_clean"] == pytest.approx(clean.mean(), rel=1e-13)
    pb = Problem.from_options()
    S0 = pb.task.target.sample(50, rng_for(0, "target"))
    tracemalloc.start()
    try:
        test_errors(pb, S0, S0, 0, n_test=100_000)  # all at once: 100 MB of tokens alone
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 30e6, peak


def test_sigterm_stops_like_ctrl_c(monkeypatch):
    """A batch system's SIGTERM killed the run with nothing said (and the table of finished records lost)."""
    import signal

    import tiedattention.simulation as sim

    real, calls = sim.simulate_record, []

    def terminated_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler), "no SIGTERM handler installed around the training loop"
            handler(signal.SIGTERM, None)  # what the signal would run (without signalling the test process)
        return real(*args, **kwargs)

    monkeypatch.setattr(sim, "simulate_record", terminated_on_the_second)
    runner, app = _cli()
    res = runner.invoke(app, [*BASE, "--alpha", "0.5,1"])
    assert res.exit_code == 130, res.output
    assert "│ 0.5 │" in res.stdout and "interrupted; 1 of 2 (α, d) records finished" in res.stderr
