"""Batched linear algebra where one matrix of a batch is singular (2026-12-02).

numpy's batched ``solve`` raises for the whole batch where one matrix meets an exact zero pivot. A T = 4 point
(spikes:2.57+mp:0.334 at d = 200, Delta = 0.0036, output noise 0.48, lambda = 6.4e-3, alpha = 0.35) lost its Stein
re-solve to it: the root finder's trial point had sigma ~ 5e44, where one node's prox Newton matrix H + I/sigma
passed Cholesky (smallest eigenvalue 2.6e-17) yet LU met a zero pivot, and the LinAlgError aborted the solve."""

import numpy as np
import pytest

from tiedattention import Problem
from tiedattention.theory.channel import _batch_mask, _modified_newton_step, _pd_mask, _solve_sym
from tiedattention.theory.state_evolution import StateEvolution

# that node's matrix (9 x 9: the reduced coordinates at T = 4), its gradient and floor 1e-8 / sigma
A_BAD = np.array([
    [
        0.02239387538484126, -0.04386784294825072, -0.044274627022034975, -0.031022109540290693,
        -0.04387107718458984, -0.04391063718675624, -0.031018344337789192, -0.04386656324486043,
        -0.031018344337789334],
    [
        -0.043867842948250725, 0.08779159501544077, 0.08776130073027993, 0.062076929209331694, 0.0877900351983114,
        0.08779003519831143, 0.06207692920932755, 0.08779003519831143, 0.06207692920933168],
    [
        -0.04427462702203497, 0.08776130073027993, 0.08815443737910818, 0.06205621552030078, 0.08776074161835709,
        0.08776074187699007, 0.062056215520300634, 0.08776074269990668, 0.062056215520300786],
    [
        -0.031022109540290686, 0.06207692920933168, 0.062056215520300786, 0.10852921055629483, 0.08284100763452992,
        -0.004387649186802228, 0.043894737857269155, 0.06207653359456198, 0.043894737857269335],
    [
        -0.04387107718458983, 0.08779003519831141, 0.0877607416183571, 0.08284100763452994, 0.16512646136373363,
        -0.004211642132246104, 0.0620566580707321, 0.0877894755681043, 0.062076533594562035],
    [
        -0.04391063718675624, 0.08779003519831143, 0.08776074187699007, -0.004387649186802228,
        -0.004211642132246104, 0.48003602778208515, 0.06207653359456212, -0.16541461047223535, 0.062076533594562035],
    [
        -0.031018344337789192, 0.06207692920932755, 0.062056215520300634, 0.043894737857269155, 0.0620566580707321,
        0.06207653359456212, 0.04400325680371714, 0.062019674635474975, 0.04389473785726924],
    [
        -0.04386656324486042, 0.08779003519831143, 0.08776074269990668, 0.06207653359456198, 0.08778947556810429,
        -0.16541461047223532, 0.062019674635474975, 0.3410337663217391, 0.06207653359456199],
    [
        -0.031018344337789328, 0.062076929209331694, 0.062056215520300786, 0.043894737857269335,
        0.06207653359456202, 0.062076533594562035, 0.04389473785726924, 0.06207653359456199, 0.04389473785726935]])
GF_BAD = np.array([
    -0.00028732657323792953, -2.1886395377661624e-05, 0.00031630852294328406, -1.906632555991676e-05,
    -1.503427421546807e-05, -5.806492385764309e-05, -7.762516891342715e-05, 9.584551086844657e-06,
    -1.604364913526067e-05])
FLOOR_BAD = 2.1610807197578104e-53


def _spd(rng, n, k):
    B = rng.normal(size=(k, n, n))
    return B @ B.transpose(0, 2, 1) + np.eye(n)


def test_the_node_passes_cholesky_but_not_lu():
    """The premise of the next test, with the pinned numpy's LAPACK (round-off decides it: another BLAS may find no
    zero pivot, and then there is nothing to survive)."""
    np.linalg.cholesky(A_BAD)  # (no error)
    try:
        np.linalg.solve(A_BAD, GF_BAD)
    except np.linalg.LinAlgError:
        return
    pytest.skip("this LAPACK's LU finds no zero pivot in A_BAD")


def test_newton_step_survives_a_singular_node_in_the_batch():
    rng = np.random.default_rng(0)
    A = _spd(rng, 9, 4)
    A[2] = A_BAD
    gf = rng.normal(size=(4, 9))
    gf[2] = GF_BAD
    floor = np.full(4, 1e-8)
    floor[2] = FLOOR_BAD
    d = _modified_newton_step(A, gf, floor)
    assert np.all(np.isfinite(d))
    # the regular nodes take the plain Newton step; the singular one a descent direction
    for i in (0, 1, 3):
        np.testing.assert_allclose(A[i] @ d[i], -gf[i], rtol=1e-10, atol=1e-12)
    assert gf[2] @ d[2] < 0


def test_solve_sym_gives_nan_rows_for_a_singular_matrix_alone():
    rng = np.random.default_rng(1)
    A = _spd(rng, 3, 5)
    A[3] = np.diag([1.0, 0.0, 2.0])
    rhs = rng.normal(size=(5, 3, 2))
    X = _solve_sym(A, rhs)
    assert np.isnan(X[3]).all()
    for i in (0, 1, 2, 4):
        np.testing.assert_allclose(A[i] @ X[i], rhs[i], rtol=1e-12, atol=1e-12)
    # as the closed form of n = 2 gives non-finite rows for a singular matrix alone
    A2 = _spd(rng, 2, 3)
    A2[1] = np.array([[1.0, 1.0], [1.0, 1.0]])
    with np.errstate(divide="ignore", invalid="ignore"):
        X2 = _solve_sym(A2, rng.normal(size=(3, 2, 1)))
    assert not np.isfinite(X2[1]).any() and np.isfinite(X2[[0, 2]]).all()


def test_batch_mask_finds_the_failing_items():
    rng = np.random.default_rng(2)
    A = _spd(rng, 4, 37)
    bad = [0, 17, 36]
    for i in bad:
        A[i] = -A[i]
    np.testing.assert_array_equal(np.flatnonzero(~_pd_mask(A)), bad)
    np.testing.assert_array_equal(np.flatnonzero(~_batch_mask(37, lambda idx: np.linalg.cholesky(A[idx]))), bad)


def test_hybr_takes_a_singular_evaluation_as_far_out(monkeypatch):
    """The root finder's trial points can lie far out (sigma ~ 5e44 above); a map evaluation that raises
    LinAlgError there is a bad trial point (as an overflow was), not the end of the solve."""
    se = StateEvolution(Problem.from_options(target="mp:0.5", noise=0.5, lam=0.01))
    calls = []

    def singular(alpha, y):
        calls.append(y)
        raise np.linalg.LinAlgError("Singular matrix")

    monkeypatch.setattr(se, "_g", singular)
    sol = se._hybr(0.3, np.zeros(3))
    assert not sol["converged"] and calls


def test_prox_softmax_raises_where_its_jacobian_is_not_finite(monkeypatch):
    """prox_softmax promises a FloatingPointError on non-finite results: a singular I + sigma H at a minimiser (NaN
    rows of _solve_sym since 2026-12-02; numpy's LinAlgError, or inf with numpy warnings at n <= 2, before)."""
    from tiedattention.theory import channel

    rng = np.random.default_rng(3)
    z, y = rng.normal(size=(4, 6)), rng.dirichlet(np.ones(3), size=(4, 3))
    assert np.all(np.isfinite(channel.prox_softmax(z, y, 1.0, 1.0, 3).jac_z))

    def singular(A, rhs):
        out = np.linalg.solve(A, rhs)
        out[1] = np.nan
        return out

    monkeypatch.setattr(channel, "_solve_sym", singular)
    with pytest.raises(FloatingPointError, match="singular"):
        channel.prox_softmax(z, y, 1.0, 1.0, 3)
