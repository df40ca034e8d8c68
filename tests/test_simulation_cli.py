"""`tiedattention simulate`: JSON Lines contract, spectra file, and one clear line for every bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from tiedattention.cli import app  # noqa: E402

runner = CliRunner()
BASE = ["simulate", "--d", "8", "--seeds", "1", "--n-test", "50", "--solver", "prox", "--threads", "1"]


def test_json_lines_and_spectra(tmp_path):
    out = tmp_path / "spec.npz"
    res = runner.invoke(app, [*BASE, "--alpha", "0.5,1", "--seeds", "2", "--json", "--save-spectra", str(out)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.strip().splitlines()]
    assert [r["alpha"] for r in lines] == [0.5, 1.0]
    for r in lines:
        for k in ("alpha", "d", "n", "seeds", "test_error_mean", "test_error_std", "test_error_clean_mean",
                  "train_error_mean", "mse_mean", "rank_mean", "seconds"):
            assert k in r
        assert r["d"] == 8 and r["seeds"] == 2 and "eigenvalues" not in r
    assert lines[0]["n"] == 32 and lines[1]["n"] == 64
    z = np.load(out)
    assert z["eigenvalues"].shape == (2, 2, 8) and z["singular_values"].shape == (2, 2, 8)
    np.testing.assert_allclose(z["singular_values"][0, 0] ** 2, np.clip(z["eigenvalues"][0, 0][::-1], 0, None),
                               atol=1e-12)
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left behind
    from tiedattention.cli_common import new_file_mode

    assert out.stat().st_mode & 0o777 == new_file_mode()  # the umask's mode, not mkstemp's 0600


def test_table_output():
    res = runner.invoke(app, [*BASE, "--alpha", "0.5", "--theory"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "simulation" in res.stdout and "…" not in res.stdout  # the table's natural width, not 80 columns


@pytest.mark.parametrize(
    "args, name",
    [
        (["--alpha", "0.5", "--lam", "-0.1"], "--lam"),
        (["--alpha", "0.5", "--noise", "-1"], "--noise"),
        (["--alpha", "0.5", "--target", "mp:0"], "kappa0"),
        (["--alpha", "0.5", "--target", "mp:-1"], "kappa0"),
        (["--alpha", "0.5", "--tokens", "1"], "--tokens"),
        (["--alpha", "0"], "--alpha"),
        (["--alpha", "0.5,-2"], "--alpha"),
        (["--alpha", "0.5", "--target", "gauss:1"], "--target"),
        (["--alpha", "0.5", "--target", "file:/nonexistent/eig.npy"], "--target"),
        (["--alpha", "0.5", "--d", "1"], "--d"),
        (["--alpha", "0.5", "--seeds", "0"], "--seeds"),
        (["--alpha", "0.5", "--solver", "sgd"], "--solver"),
        (["--alpha", "0.5", "--device", "tpu"], "--device"),
        (["--alpha", "0.5", "--save-spectra", "/nonexistent/dir/s.npz"], "--save-spectra"),
        (["--alpha", "0.5", "--n-test", "1"], "--n-test"),
        (["--alpha", "0.5", "--d", "8,8"], "--d"),
        (["--alpha", "0.5", "--d", "8,x"], "--d"),
        (["--alpha", "0.5", "--d", "8,1"], "--d"),
        (["--alpha", "0.5", "--d", "8,12"], "--seeds"),  # one seed: no standard error to weight the 1/d fit
        (["--alpha", "0.5", "--d", "8,12", "--seeds", "2", "--save-spectra", "s.npz"], "--save-spectra"),
        (["--alpha", "0.5", "--seed", "-1"], "--seed"),
        (["--alpha", "0.5", "--save-spectra", "."], "--save-spectra"),  # a directory: refused before training
        (["--alpha", "0.1:0.1:3"], "--alpha"),  # three identical points
        # click's own usage errors: one line too, naming the option
        (["--alpha", "0.5", "--seeds", "x"], "--seeds"),
        (["--alpha", "0.5", "--bogus", "1"], "--bogus"),
        ([], "--alpha"),
    ],
)
def test_bad_input_one_clear_line(args, name, tmp_path):
    res = runner.invoke(app, [*BASE, *args])
    assert res.exit_code == 2, res.output
    err = res.stderr.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and name in err[0]
    assert res.stdout == ""


def test_two_dimensional_eigenvalue_file_is_refused(tmp_path):
    path = tmp_path / "eig.npy"
    np.save(path, np.ones((4, 4)))
    res = runner.invoke(app, [*BASE, "--alpha", "0.5", "--target", f"file:{path}"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == ["error: --target: custom eigenvalues must be a 1-D list (got an array "
                                               "of shape (4, 4))"]


def test_help_is_unchanged_by_the_one_line_errors():
    res = runner.invoke(app, ["simulate", "--help"])
    assert res.exit_code == 0 and "Usage: " in res.stdout and "--save-spectra" in res.stdout
    assert res.stderr == ""


def test_version_names_the_package_and_its_numerics():
    import numpy
    import scipy

    import tiedattention

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    line = res.stdout.strip()
    assert line.startswith(f"tiedattention {tiedattention.__version__} (python ")
    assert f"numpy {numpy.__version__}" in line and f"scipy {scipy.__version__}" in line and "torch " in line
    assert res.stderr == ""


def test_cuda_unavailable_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    res = runner.invoke(app, [*BASE, "--alpha", "0.5", "--device", "cuda"])
    assert res.exit_code == 2
    assert res.stderr.strip() == "error: --device: CUDA is not available"


def test_several_d_give_the_1_over_d_fit_and_the_theory():
    """Per alpha: a record per d, then the d -> infinity record whose numbers are the weighted fit a + b/d of
    the per-d records (the library's extrapolate_inverse_d), and with --theory the SE's values and z-scores."""
    from tiedattention.problem import Problem
    from tiedattention.stats import extrapolate_inverse_d
    from tiedattention.theory.api import theory_records

    res = runner.invoke(app, [*BASE, "--alpha", "0.5", "--d", "8,12,16", "--seeds", "2", "--theory", "--json"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.strip().splitlines()]
    assert [r["d"] for r in lines] == [8, 12, 16, None]
    fit = lines[-1]
    assert fit["extrapolated"] is True and fit["dims"] == [8, 12, 16] and fit["dof"] == 1 and fit["n"] is None
    for key in ("test_error", "mse", "objective"):
        ref = extrapolate_inverse_d([8, 12, 16], [r[f"{key}_mean"] for r in lines[:3]],
                                    [r[f"{key}_sem"] for r in lines[:3]])
        assert fit[f"{key}_mean"] == pytest.approx(ref.intercept, rel=1e-12)
        assert fit[f"{key}_sem"] == pytest.approx(ref.intercept_sem, rel=1e-12)
        assert fit[f"{key}_slope"] == pytest.approx(ref.slope, rel=1e-12)
        assert fit[f"{key}_chi2"] == pytest.approx(ref.chi2, rel=1e-9, abs=1e-12)
    se = theory_records(Problem.from_options(), [0.5])[0]
    assert se["test_error"] == pytest.approx(0.1360, abs=3e-4)  # state_evolution.md: the reference point
    for r in lines:
        assert r["se_test_error"] == se["test_error"] and r["se_mse"] == se["mse"] and r["se_converged"]
        assert r["se_d"] is None
        z = (r["test_error_mean"] - se["test_error"]) / np.hypot(r["test_error_sem"], se["err_test_error"])
        assert r["z_test_error"] == pytest.approx(z, rel=1e-12)
    table = runner.invoke(app, [*BASE, "--alpha", "0.5", "--d", "8,12", "--seeds", "2"])
    assert table.exit_code == 0, table.output
    assert "∞" in table.stdout and "1/d fit" in table.stdout


def test_theory_at_each_d_for_a_spectrum_that_depends_on_d():
    """Spikes (atoms of weight 1/d): the SE is solved at each record's d (se_d = d) and the 1/d fit, which has
    no d -> infinity theory of the same spectrum, carries none."""
    from tiedattention.problem import Problem
    from tiedattention.theory.api import theory_records

    res = runner.invoke(app, [*BASE, "--alpha", "0.5", "--d", "8,12", "--seeds", "2", "--theory",
                              "--target", "spikes:3,2", "--json"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.strip().splitlines()]
    assert [r["d"] for r in lines] == [8, 12, None]
    p = Problem.from_options(target="spikes:3,2")
    for r in lines[:2]:
        se = theory_records(p, [0.5], d=r["d"])[0]
        assert r["se_d"] == r["d"] and r["se_test_error"] == pytest.approx(se["test_error"], rel=1e-12)
    assert lines[0]["se_test_error"] != lines[1]["se_test_error"]  # the spectrum, hence the SE, depends on d
    assert "se_test_error" not in lines[2] and "z_test_error" not in lines[2]


def test_a_d_without_a_finite_value_leaves_that_fit_nan():
    """Failed seeds report NaN (JSON null) metrics; the fit of that observable is then NaN too, not an error
    after half the output, and the other observables are still fitted."""
    from tiedattention.commands.simulate import EXTRAPOLATED, extrapolated_record

    recs = []
    for d, te in ((8, 0.2), (12, float("nan")), (16, 0.18)):
        r = {"alpha": 0.5, "d": d, "seeds": 2, "converged_all": bool(te == te), "seconds": 1.0}
        for key in EXTRAPOLATED:
            r[f"{key}_mean"], r[f"{key}_sem"] = (te if key == "test_error" else 0.1 + 1.0 / d), 0.01
        recs.append(r)
    out = extrapolated_record(recs)
    assert np.isnan(out["test_error_mean"]) and np.isnan(out["test_error_sem"])
    assert out["mse_mean"] == pytest.approx(0.1, abs=1e-12) and out["mse_slope"] == pytest.approx(1.0, abs=1e-9)
    assert out["converged_all"] is False and out["dof"] == 1
