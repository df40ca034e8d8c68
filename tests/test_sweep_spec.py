"""Sweep specs: parsing, validation (one clear error naming the key), canonical params and cell keys."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tiedattention import __version__
from tiedattention.errors import ParameterError
from tiedattention.problem import Problem
from tiedattention.sweep import cell_key, load_spec, parse_spec
from tiedattention.sweep.spec import PROBLEM_OPTIONS

EXAMPLE = """
[grid]
alpha = [0.05, 0.1]
lam = [0.01, 0.001]

[run]
routes = ["theory"]
"""


def test_issue_example_is_a_four_cell_sweep(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(EXAMPLE)
    spec = load_spec(path)
    assert len(spec) == 4
    assert spec.routes == ("theory",)
    points = {(c.params["alpha"], c.params["lam"]) for c in spec.cells}
    assert points == {(0.05, 0.01), (0.05, 0.001), (0.1, 0.01), (0.1, 0.001)}
    for cell in spec.cells:
        # every problem option is filled in with its default, so the key does not depend on what was omitted
        assert set(PROBLEM_OPTIONS) <= set(cell.params)
        assert cell.params["noise"] == 0.5 and cell.params["tokens"] == 2 and cell.params["target"] == "mp:0.5"
        assert cell.params["route"] == "theory"
        assert "d" not in cell.params and "device" not in cell.params
        assert cell.key == cell_key(cell.params)
    assert len(set(spec.keys)) == 4


def test_key_is_stable_across_spellings_and_pinned():
    a = parse_spec(EXAMPLE)
    # same sweep, spelled differently: other key order, ints for floats, defaults given explicitly
    b = parse_spec(
        '[run]\nroutes = ["theory"]\n[grid]\nnoise = [0.5]\nlam = [0.01, 0.001]\nalpha = [0.05, 0.1]\n'
        'target = ["mp:0.50"]\ntokens = [2.0]\n'
    )
    assert sorted(a.keys) == sorted(b.keys)
    # Pinned: a change of canonicalisation would silently orphan every existing store. Update deliberately.
    params = {"target": "mp:0.5", "alpha": 1.0, "route": "theory"}
    assert cell_key(params, "0.1.0") == cell_key(dict(reversed(list(params.items()))), "0.1.0")
    documented = b'{"params":{"alpha":1.0,"route":"theory","target":"mp:0.5"},"version":"0.1.0"}'
    assert cell_key(params, "0.1.0") == hashlib.sha256(documented).hexdigest()
    assert cell_key(params, "0.1.0") == "b87625c1132ed465ded8c781194079dcb8341859f78588b246e4553456276f90"


def test_key_depends_on_version_and_every_param_but_not_device():
    cell = parse_spec(EXAMPLE).cells[0]
    assert cell_key(cell.params) == cell_key(cell.params, __version__)
    assert cell_key(cell.params, "0.1.0") != cell_key(cell.params, "9.9.9")
    for name in ("alpha", "lam", "noise"):
        changed = {**cell.params, name: cell.params[name] * 2 + 0.1}
        assert cell_key(changed) != cell.key
    sim = '[grid]\nalpha = [0.5]\n[run]\nroutes = ["simulate"]\nd = 40\nseeds = 2\ndevice = "{dev}"\n'
    cpu, gpu = parse_spec(sim.format(dev="cpu")), parse_spec(sim.format(dev="cuda"))
    assert cpu.keys == gpu.keys
    assert cpu.cells[0].device == "cpu" and gpu.cells[0].device == "cuda"
    assert cpu.cells[0].params["d"] == 40 and cpu.cells[0].params["seeds"] == 2


def test_routes_multiply_cells_and_theory_ignores_d():
    spec = parse_spec(
        '[grid]\nalpha = [0.5, 1.0]\nd = [20, 40]\nseeds = [2]\n[run]\nroutes = ["theory", "simulate"]\n'
        'solver = "adam"\n'
    )
    theory = [c for c in spec.cells if c.route == "theory"]
    sim = [c for c in spec.cells if c.route == "simulate"]
    assert len(theory) == 2  # d and seeds do not change the theory: one cell per alpha, not per d
    assert len(sim) == 4
    assert all("d" not in c.params and "solver" not in c.params for c in theory)
    assert {(c.params["alpha"], c.params["d"]) for c in sim} == {(0.5, 20), (0.5, 40), (1.0, 20), (1.0, 40)}
    assert all(c.params["solver"] == "adam" for c in sim)


def test_theory_of_a_spectrum_that_depends_on_d_has_a_cell_per_d():
    """Power laws and spikes (atoms of weight 1/d) have a theory at each d: their theory cells carry d, the MP
    target's do not (its keys are unchanged), and the route solves the SE at that d."""
    from tiedattention.sweep.routes import route_theory
    from tiedattention.theory import theory_record

    spec = parse_spec('[grid]\nalpha = [0.5]\ntarget = ["mp:0.5", "powerlaw:1.25"]\nd = [20, 40]\n')
    cells = {(c.params["target"], c.params.get("d")) for c in spec.cells}
    assert cells == {("mp:0.5", None), ("powerlaw:1.25", 20), ("powerlaw:1.25", 40)}
    mp_only = parse_spec('[grid]\nalpha = [0.5]\n').cells[0]
    assert next(c for c in spec.cells if c.params["target"] == "mp:0.5").key == mp_only.key
    cell = next(c for c in spec.cells if c.params.get("d") == 20)
    rec = route_theory(cell.params)
    ref = theory_record(Problem.from_options(target="powerlaw:1.25"), 0.5, d=20)
    assert rec["test_error"] == ref["test_error"]
    assert rec["test_error"] != theory_record(Problem.from_options(target="powerlaw:1.25"), 0.5, d=40)["test_error"]


def test_file_target_key_follows_file_content(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "eig.npy", np.linspace(0.1, 2.0, 50))
    text = '[grid]\nalpha = [0.5]\ntarget = ["file:eig.npy"]\n[run]\nroutes = ["theory"]\n'
    first = parse_spec(text).cells[0]
    assert first.params["target"] == f"file:{tmp_path / 'eig.npy'}"  # absolute: workers may run elsewhere
    np.save(tmp_path / "eig.npy", np.linspace(0.1, 3.0, 50))
    assert parse_spec(text).cells[0].key != first.key


@pytest.mark.parametrize(
    ("text", "param", "fragment"),
    [
        ("[grid]\nalpha = [0.1]\nlamda = [0.1]\n", "lamda", "unknown parameter in [grid]"),
        ("[grid]\nalpha = [0.1]\nlam = [0.01, -1]\n", "lam", "must be >= 0"),
        ("[grid]\nalpha = [0.1]\nnoise_out = [-1]\n", "noise-out", "must be >= 0"),
        ("[grid]\nalpha = [0.1, 0]\n", "alpha", "must be > 0"),
        ("[grid]\nalpha = [0.1]\ntokens = [1]\n", "tokens", "integer >= 2"),
        ("[grid]\nalpha = [0.1]\ntarget = ['mp:0.5', 'foo:1']\n", "target", "unknown target"),
        ("[grid]\nalpha = [0.1]\nmodel = ['tied']\n", "model", "factorized"),
        ("[grid]\nalpha = [0.1]\nd = [10, 2.5]\n", "d", "integer >= 2"),
        ("[grid]\nalpha = []\n", "alpha", "at least one value"),
        ("[grid]\nlam = [0.1]\n", "alpha", "needs at least one alpha"),
        ("[grid]\nalpha = [0.1]\n[runs]\nroutes = ['theory']\n", "runs", "unknown table"),
        ("[grid]\nalpha = [0.1]\n[run]\nroutes = ['theroy']\n", "routes", "unknown route"),
        ("[grid]\nalpha = [0.1]\n[run]\nroutes = ['theory']\nepochs = 3\n", "epochs", "unknown setting"),
        ("[grid]\nalpha = [0.1]\n[run]\nroutes = ['theory']\nlam = 0.1\n", "lam", "put it in [grid]"),
        ("[grid]\nalpha = [0.1]\n[run]\nroutes = ['simulate']\nd = 10\n", "seeds", "route simulate needs"),
        ("[grid]\nalpha = [0.1]\nd = [10]\n[run]\nd = 10\n", "d", "both in [grid] and"),
        ("[grid]\nalpha = [0.1]\n[run]\ndevice = 'tpu'\n", "device", "cuda:N"),
        ("[grid]\nalpha = [0.1]\ntarget = ['powerlaw:1.25']\n", "d", "route theory needs d"),
        ("[grid]\nalpha = [0.1\n", "spec", "not valid TOML"),
    ],
)
def test_bad_specs_name_the_parameter(text, param, fragment):
    with pytest.raises(ParameterError) as info:
        parse_spec(text, path="grid.toml")
    assert info.value.param == param
    assert fragment in info.value.message


def test_unreadable_spec_file(tmp_path):
    with pytest.raises(ParameterError) as info:
        load_spec(tmp_path / "missing.toml")
    assert info.value.param == "spec" and "missing.toml" in info.value.message


def test_scalars_become_one_element_lists_and_duplicates_collapse():
    spec = parse_spec('[grid]\nalpha = 0.5\nlam = [0.01, 0.01, 0.001]\n[run]\nroutes = "sleep"\nsleep = 0\n')
    assert spec.grid["alpha"] == [0.5]
    assert spec.grid["lam"] == [0.01, 0.001]
    assert len(spec) == 2 and spec.cells[0].params["sleep"] == 0.0
