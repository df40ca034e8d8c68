"""Layering rules of docs/architecture.md: theory never imports torch or the simulation layer."""

import ast
import pathlib
import subprocess
import sys

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "tiedattention"


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            out.add("." * node.level + mod)
    return out


def test_theory_does_not_import_simulation_or_torch():
    for f in (SRC / "theory").glob("*.py"):
        for mod in _imports(f):
            assert "simulation" not in mod, (f, mod)
            assert not mod.startswith("torch"), (f, mod)


def test_simulation_does_not_import_theory():
    for f in (SRC / "simulation").glob("*.py"):
        for mod in _imports(f):
            assert "theory" not in mod, (f, mod)


def test_importing_theory_leaves_torch_unloaded():
    code = "import sys, tiedattention.theory, tiedattention.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
