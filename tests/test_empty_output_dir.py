"""An empty --out / --store is refused, not read as the working directory.

``Path("")`` is ``Path(".")``: before the fix, ``tiedattention reproduce fig1 --out "$UNSET"`` wrote fig1.* and
store/ into the working directory without a word (found by the session-12 figure review). Each command below must
exit 2 with one line naming the option, and write nothing where it runs.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tiedattention.cli import app
from tiedattention.cli_common import output_dir
from tiedattention.errors import ParameterError


@pytest.mark.parametrize("blank", ["", "  "])
@pytest.mark.parametrize("argv,option", [
    (["reproduce", "fig1", "--quick", "--out"], "out"),
    (["phase", "--alpha", "0.5", "--over", "lam=0.1", "--store"], "store"),
    (["sweep", "SPEC", "--out"], "out"),
])
def test_blank_output_directory_is_refused(tmp_path, monkeypatch, argv, option, blank):
    spec = tmp_path / "spec.toml"
    spec.write_text('[grid]\nalpha = [0.5]\n[run]\nroutes = ["theory"]\n')
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [str(spec) if a == "SPEC" else a for a in argv] + [blank]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"error: --{option}: is empty (to write into the working directory, say --{option} .)"], res.output
    assert list(work.iterdir()) == []


def test_output_dir_keeps_a_real_path(tmp_path):
    assert output_dir(str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"
    assert str(output_dir(".")) == "."
    with pytest.raises(ParameterError, match="store"):
        output_dir("", "store")
