"""The Parquet store: atomic writes, damaged files found with their path and moved aside, nothing else lost."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tiedattention.sweep import Store, parse_spec, run_cell, run_sweep
from tiedattention.sweep.routes import _unit_hash
from tiedattention.sweep.spec import canonical_json

SPEC = parse_spec('[grid]\nalpha = [0.1, 0.2, 0.3, 0.4]\n[run]\nroutes = ["sleep"]\nsleep = 0\n')


def _fill(store: Store, spec=SPEC) -> None:
    """Compute the cells in this process (no pool) and write them."""
    for cell in spec.cells:
        store.write(cell.key, run_cell(cell.payload()))


def test_write_read_roundtrip_and_no_temp_files(tmp_path):
    store = Store(tmp_path / "s")
    _fill(store)
    assert store.done_keys() == set(SPEC.keys)
    assert sorted(os.listdir(store.cells_dir)) == sorted(f"{k}.parquet" for k in SPEC.keys)  # no temp left
    df = store.read_table(SPEC.keys)
    assert list(df["key"]) == SPEC.keys  # requested order
    assert list(df["alpha"]) == [0.1, 0.2, 0.3, 0.4]
    expected = [_unit_hash(canonical_json(c.params)) for c in SPEC.cells]
    assert np.allclose(df["value"], expected) and np.allclose(df["value2"], df["alpha"] * 2)
    assert "params_json" not in df.columns
    assert store.verify() == []


def test_temp_files_are_never_cells(tmp_path):
    store = Store(tmp_path / "s")
    _fill(store)
    key = SPEC.keys[0]
    # a writer killed mid-write leaves a temp file: never counted, never read, cleaned when old
    tmp = store.cells_dir / f".tmp-{key[:16]}-123-abcdef12.parquet"
    tmp.write_bytes(b"PAR1 half a file")
    assert store.done_keys() == set(SPEC.keys) and len(store) == 4
    assert store.verify() == []
    assert store.cleanup_temp(min_age_s=3600) == 0 and tmp.exists()
    assert store.cleanup_temp(min_age_s=0) == 1 and not tmp.exists()


def test_nonscalar_results_are_kept(tmp_path):
    store = Store(tmp_path / "s")
    cell = SPEC.cells[0]
    record = run_cell(cell.payload())
    record.update(spectrum=np.arange(3.0), mixed=[1, "a"], nested={"a": np.float64(1.5)}, flag=np.bool_(True))
    store.write(cell.key, record)
    row = store.read(cell.key)
    assert row["spectrum"] == [0.0, 1.0, 2.0] and row["flag"] is True
    assert row["mixed"] == '[1, "a"]'  # not typeable by Arrow: kept as JSON text rather than lost


def _damage(store: Store) -> dict[str, str]:
    """Truncate one file, flip bytes in another, put a valid file under a wrong name. Returns key -> how."""
    k_trunc, k_flip, k_swap, _ = SPEC.keys
    p = store.path_for(k_trunc)
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    p = store.path_for(k_flip)
    data = bytearray(p.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0xFF
    p.write_bytes(bytes(data))
    shutil.copyfile(store.path_for(SPEC.keys[3]), store.path_for(k_swap))
    return {k_trunc: "unreadable", k_flip: "", k_swap: "not the key in its name"}


def test_verify_reports_damaged_files_with_their_path(tmp_path, capsys):
    store = Store(tmp_path / "s")
    _fill(store)
    damaged = _damage(store)
    problems = store.verify()
    assert {p.path for p in problems} == {store.path_for(k) for k in damaged}
    for p in problems:
        assert damaged[p.path.stem] in p.message
        assert str(p.path) in str(p)
    err = capsys.readouterr().err
    assert all(str(store.path_for(k)) in err for k in damaged)
    # verify() without quarantine changes nothing; read_table skips damaged files, keeps the good one
    assert store.done_keys() == set(SPEC.keys)
    assert list(store.read_table()["key"]) == [SPEC.keys[3]]


def test_damaged_cells_are_moved_aside_and_recomputed_nothing_else_lost(tmp_path, capsys):
    store = Store(tmp_path / "s")
    _fill(store)
    good = SPEC.keys[3]
    good_stat = store.path_for(good).stat()
    good_bytes = store.path_for(good).read_bytes()
    damaged = _damage(store)

    summary = run_sweep(SPEC, store, max_workers=1, progress=False)
    assert {p.path for p in summary.corrupt} == {store.path_for(k) for k in damaged}
    assert "recomputed" in capsys.readouterr().err
    assert summary.skipped == 1 and summary.computed == 3 and summary.failed == 0
    assert len(os.listdir(store.corrupt_dir)) == 3  # kept for inspection, never deleted
    # the good cell was not touched
    assert store.path_for(good).read_bytes() == good_bytes
    assert store.path_for(good).stat().st_mtime_ns == good_stat.st_mtime_ns
    assert store.verify() == []
    df = summary.table()
    assert list(df["key"]) == SPEC.keys
    assert np.allclose(df["value"], [_unit_hash(canonical_json(c.params)) for c in SPEC.cells])


def test_manifest_and_spec_copy(tmp_path):
    store = Store(tmp_path / "s")
    run_sweep(SPEC, store, max_workers=1, progress=False)
    import json

    manifest = json.loads((store.root / "manifest.json").read_text())
    assert manifest["cells"] == 4 and manifest["routes"] == ["sleep"]
    assert "alpha" in (store.root / "spec.toml").read_text()


def test_bad_key_rejected(tmp_path):
    with pytest.raises(ValueError):
        Store(tmp_path).path_for("../escape")
