"""Findings of session 16 (option sweeps of the CLI): the theory command's replica-symmetry note, quiet stderr when
it is not a terminal, the prox residual's round-off floor (a spurious ConvergenceWarning on a converged λ = 1e-4
curve), simulate's warning where λ = 0 has no minimiser, and spectrum at perfect recovery."""

import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from tiedattention import Problem
from tiedattention.cli import app
from tiedattention.commands.theory import _note_prox_switching
from tiedattention.theory import channel as ch
from tiedattention.theory.api import theory_records


def test_note_names_only_converged_points_with_a_large_branch_share(capsys):
    recs = [{"alpha": 0.1, "converged": True, "err_branch_share": 0.0},
            {"alpha": 0.25, "converged": True, "err_branch_share": 0.085},
            {"alpha": 0.3, "converged": True, "err_branch_share": 0.0011},
            {"alpha": 0.4, "converged": True, "err_branch_share": 0.0009},
            {"alpha": 0.5, "converged": False, "err_branch_share": 0.5},
            {"alpha": 0.6, "converged": True}]
    _note_prox_switching(recs)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: replica symmetry is not guaranteed at α = 0.25, 0.3:"), err
    assert "8.5 %" in err[0] and "--rs-stability" in err[0]
    _note_prox_switching(recs[:1] + recs[3:])
    assert capsys.readouterr().err == ""


def test_note_lists_at_most_six_points(capsys):
    _note_prox_switching([{"alpha": a, "converged": True, "err_branch_share": 0.01} for a in np.linspace(0.1, 1, 9)])
    err = capsys.readouterr().err
    assert "0.1, 0.2125, 0.325, 0.4375, 0.55, 0.6625, ... (9 points)" in err


def test_notes_of_scaled_starts_are_printed_whole(capsys):
    """theory prints the "two fixed points" note and the stalled-start note of a converged point (which one is shown,
    and whether it is RS-stable), not the rest of its message; nothing for an unconverged point, one without such a
    note, or the lambda-continuation's "cold start stalled (q = ...), continued ..." (no scaled start)."""
    from tiedattention.commands.theory import _note_branches

    note = ("two fixed points: this one (from a start at 100x the cold solve's q and Sigma) has the lower objective, "
            "0.065 against 0.0698 at q = 2.49 (test error 0.4668), but it is RS-unstable (AT = 1.39, the other's "
            "0.716): an unstable branch's RS objective can lie below the ERM's, so the ERM may sit on the other")
    stalled = ("cold start stalled at q = 6.6 (residual 3.1e-03), converged from a start at 100x its q and Sigma (the "
               "lowest objective of the scaled starts (10.0, 100.0), AT = 2.06: RS-unstable)")
    _note_branches([{"alpha": 0.5, "converged": True, "message": f"converged to the quadrature accuracy; {note}; "
                                                                  "qmc4x2^14 rule with the Stein forms"},
                    {"alpha": 0.6, "converged": False, "message": note},
                    {"alpha": 0.7, "converged": True, "message": f"converged; {stalled}"},
                    {"alpha": 0.8, "converged": True, "message": "converged; cold start stalled (q = 5.11, residual "
                                                                  "1.3e-01), continued from the fixed point at lambda "
                                                                  "= 0.001"}])
    assert capsys.readouterr().err.splitlines() == [f"note: α = 0.5: {note}", f"note: α = 0.7: {stalled}"]


def test_note_of_a_jacobian_forms_point(capsys):
    """theory names the converged points reported with the Jacobian forms although their branch share called for the
    Stein forms (the message's "Jacobian forms kept although ..."): nothing else in the output says the number may
    miss the jumps' surface terms. Not an unconverged point (its warning prints the message whole)."""
    from tiedattention.commands.theory import _note_jacobian_kept
    from tiedattention.theory.state_evolution import NOTE_JACOBIAN_KEPT

    kept = (f"{NOTE_JACOBIAN_KEPT}branch share 1.2e-02 > 0.001 at the Jacobian forms' fixed point (test error "
            "1.79368, residual 1.3e-11): the Stein re-solve from it did not converge (stalled at residual 2.04e-02)")
    _note_jacobian_kept([{"alpha": 0.25, "converged": True, "message": kept},
                         {"alpha": 0.3, "converged": False, "message": kept},
                         {"alpha": 0.4, "converged": True, "message": "Stein forms of m_hat, sigma_hat: branch share"},
                         {"alpha": 0.5, "converged": True, "message": f"converged to the quadrature accuracy; {kept}"}])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("note: α = 0.25, 0.5: the Jacobian forms' fixed point is shown"), err
    _note_jacobian_kept([{"alpha": 0.4, "converged": True, "message": ""}])
    assert capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def record():
    return theory_records(Problem.from_options(), [0.5])[0]


@pytest.mark.parametrize("rs", [False, True])
def test_cli_prints_the_note_unless_rs_stability_is_asked(monkeypatch, record, rs):
    """A record with a 5 % branch share gets the note on stderr (the JSON on stdout unchanged); with --rs-stability
    the AT columns say it instead."""
    import tiedattention.commands.theory as cmd
    import tiedattention.theory.api as api

    monkeypatch.setattr(api, "theory_records", lambda *a, **k: [record | {"err_branch_share": 0.05}])
    monkeypatch.setattr(cmd, "_rs_fields", lambda *a: {"rs_at": 0.5, "rs_switching": 0.01})
    res = CliRunner().invoke(app, ["theory", "--alpha", "0.5", "--json"] + (["--rs-stability"] if rs else []))
    assert res.exit_code == 0, res.output
    assert ("note: replica symmetry is not guaranteed at α = 0.5:" in res.stderr) is not rs, res.stderr
    assert res.stdout.count("\n") == 1 and '"err_branch_share": 0.05' in res.stdout


def test_stderr_has_no_stray_line_when_not_a_terminal():
    """rich's transient progress bar wrote an empty line to a non-terminal stderr at its end."""
    res = CliRunner().invoke(app, ["theory", "--alpha", "0.5,1", "--json"])
    assert res.exit_code == 0 and res.stderr == "", repr(res.stderr)


# a far-tail node of an Anderson excursion of the lambda = 1e-4 curve at alpha = 0.5 (|b| ~ 2e3, sigma ~ 1.6e4):
# its Newton step fell below the precision of c at a scaled residual of 2e-10 .. 1.2e-9, above the warning's
# old 1e-9 (session 16)
B = np.array([[1889.26094377, 1336.0408828]])
LAB = np.array([[6.72872353e-04, 5.00089966e-01, 0.0]])
SIG = np.array([15730.754256726523])
C0 = np.array([[1146.30157448, 810.55788529]])


def test_far_tail_node_stops_at_its_round_off_floor():
    kern = ch._TwoTokenKernel(1.0)
    c, it, _ = ch._newton_reduced(kern, B, LAB, SIG, C0, 1e-12, 100)
    assert it <= 10  # frozen once c + d == c, checked from pass 8 on (it ran to max_iter = 100 before)
    r = ch._prox_reduced(kern, B, LAB, SIG, [C0], 1e-12, 100)
    assert np.array_equal(r.c, c)
    floor = ch._residual_floor(r, B, SIG[0], 1e-12)
    assert 1e-9 < r.residual[0] * 5 and r.residual[0] < floor[0]  # above 2e-10, below its floor (~4e-9)
    # a node well inside: the floor is the usual max(tol, 1e-9)
    b = np.array([[0.3, -0.2]])
    r2 = ch._prox_reduced(kern, b, LAB, np.array([2.0]), [b], 1e-12, 100)
    assert ch._residual_floor(r2, b, 2.0, 1e-12)[0] == 1e-9 and r2.residual[0] <= 1e-12


def test_freezing_returns_the_same_minimisers_as_running_to_max_iter():
    """Random nodes of several scales: the Newton result with max_iter 100 equals the one with max_iter 400 bit for
    bit (a frozen node is not revisited; none changes afterwards)."""
    rng = np.random.default_rng(3)
    kern = ch._TwoTokenKernel(2.0)
    b = rng.standard_normal((400, 2)) * np.repeat([1.0, 30.0, 1e3, 3e3], 100)[:, None]
    lab = np.column_stack([rng.uniform(0, 1, (400, 2)), np.zeros(400)])
    sig = np.repeat([0.5, 10.0, 1e3, 2e4], 100)
    c1, it1, _ = ch._newton_reduced(kern, b, lab, sig, b, 1e-12, 100)
    c2, it2, _ = ch._newton_reduced(kern, b, lab, sig, b, 1e-12, 400)
    assert np.array_equal(c1, c2) and it1 == it2 < 100


def test_far_tail_state_gives_no_spurious_prox_warning():
    """An Anderson excursion of the lambda = 1e-4 curve at alpha = 0.5 (q = 2.3e5, Sigma = 1.6e4) made the channel
    warn 'max prox residual 1.23e-09 > tol' for the node above (the curve 0.1, 0.25, 0.5; converged). The residual
    is still reported as it is; the warning is gone."""
    from tiedattention.errors import ConvergenceWarning
    from tiedattention.theory.state_evolution import StateEvolution

    chan = StateEvolution(Problem.from_options(lam=1e-4)).channel
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        mom = chan.moments(0.5, 234761.4612326249, 431.33618841039777, 15730.754256726523)
    assert 1e-9 < mom.prox_residual < 2e-9


def test_simulate_warns_where_lambda_zero_with_output_noise_has_no_minimiser(capsys):
    """The SE refuses lambda = 0 with seq2lab output noise below the interpolation threshold (no minimiser); the
    trainers stop somewhere and call it converged (prox, d = 24, T = 3, alpha = 0.05: test error 3.41), so
    `simulate` warns, naming the alphas below the threshold (alpha_bar = 0.1 < 0.307 < 1)."""
    from tiedattention.commands.simulate import _warn_no_minimiser

    p = Problem.from_options(lam=0, noise_out=0.1)
    _warn_no_minimiser(p, [0.05, 0.5], [20])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: α = 0.05: λ = 0 with output noise below"), err
    assert "ᾱ < 0.307" in err[0]
    for q in (p.replace_student(lam=1e-4), Problem.from_options(lam=0), Problem.from_options(lam=0, noise_out=0.1,
                                                                                            task="seq2seq")):
        _warn_no_minimiser(q, [0.05], [20])
    _warn_no_minimiser(p, [0.5, 1.0], [20])
    assert capsys.readouterr().err == ""


def test_spectrum_at_perfect_recovery_says_so_instead_of_a_traceback():
    """Noiseless lambda = 0 above the perfect-recovery threshold: delta = 0, where FreeConvolution raised 'delta must
    be > 0' as a traceback through `spectrum` (found by the session-16 option sweep). Now one message, exit 1."""
    import json

    from tiedattention.theory.spectrum import spectrum_from_result
    from tiedattention.theory.state_evolution import StateEvolution

    p = Problem.from_options(target="spikes:3,2,1", noise=0, lam=0, beta=0.5)
    se = StateEvolution(p, d=100)
    res = se.solve(0.1)
    assert res.converged and res.delta == 0.0
    with pytest.raises(ValueError, match=r"perfect recovery at alpha=0.1 .*S_hat = 2 S0"):
        spectrum_from_result(p, se.measure, res)
    args = ["spectrum", "--alpha", "0.1", "--target", "spikes:3,2,1", "--noise", "0", "--lam", "0", "--d", "100"]
    r = CliRunner().invoke(app, args + ["--json"])
    rec = json.loads(r.stdout)
    assert r.exit_code == 1 and rec["theory"] is None and rec["message"].startswith("perfect recovery"), r.output
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.stderr.strip().endswith("not built at delta = 0: no spectrum"), r.stderr


def test_non_finite_spectral_integrals_raise_instead_of_numpy_warnings():
    """A degenerate SE iterate (spectrum --target powerlaw:1.25 --tokens 3 --kappa 2 --task seq2seq --lam 1e-4
    --alpha 2 --d 100) overflowed the spectral sums: inf - inf printed numpy's 'invalid value encountered' three
    times before the map's own finiteness check raised. Now the quadrature raises FloatingPointError, naming
    delta, and prints nothing."""
    from tiedattention.targets import MPTarget
    from tiedattention.theory.spectral import FreeConvolution

    fc = FreeConvolution(MPTarget(0.5).measure(), 0.5)
    pieces = fc._pieces_above(0.0)
    ok = fc.adaptive(pieces, lambda y, g: [np.ones_like(y)])
    assert 0.5 < ok["totals"][0] < 1.0  # the density's mass above y = 0 (finite: no error)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FloatingPointError, match="non-finite integrals at delta = 0.5"):
            fc.adaptive(pieces, lambda y, g: [np.where(y > np.median(y), np.inf, -np.inf)])
