"""Checkpoints: atomic writes, latest-good discovery, weights-only loading, RNG round trip."""

from __future__ import annotations

import os
import pickle
import random
import warnings
import zipfile

import numpy as np
import pytest
import torch

from engine_helpers import ce, data, loader, twins
from pitstop.engine import CheckpointError, CorruptCheckpointError, Recipe, fit, latest_checkpoint, load_checkpoint, load_latest, save_checkpoint
from pitstop.engine.checkpoint import checkpoint_path, list_checkpoints, rng_state, set_rng_state


def _state(value: float) -> dict:
    return {"w": torch.full((256, 256), value), "step": int(value)}


def test_save_is_atomic_when_the_write_fails_midway(tmp_path, monkeypatch):
    good = save_checkpoint(_state(1.0), checkpoint_path(tmp_path, 1))
    target = checkpoint_path(tmp_path, 1)  # overwrite the same name: the old one must survive

    def dying_save(obj, f):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(_state(2.0), target)
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(good)["w"], torch.full((256, 256), 1.0))
    assert sorted(os.listdir(tmp_path)) == ["step-000000001.pt"]  # the temp file was removed


def test_a_truncated_or_corrupt_newest_file_is_never_picked(tmp_path):
    save_checkpoint(_state(1.0), checkpoint_path(tmp_path, 1))
    save_checkpoint(_state(2.0), checkpoint_path(tmp_path, 2))
    newest = save_checkpoint(_state(3.0), checkpoint_path(tmp_path, 3))
    full = newest.read_bytes()
    newest.write_bytes(full[: len(full) // 2])  # truncated mid-write (no atomic rename)
    with pytest.warns(UserWarning, match=r"step-000000003\.pt: truncated or corrupt"):
        assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 2)
    flipped = bytearray(checkpoint_path(tmp_path, 2).read_bytes())
    with zipfile.ZipFile(checkpoint_path(tmp_path, 2)) as zf:  # flip one byte inside the tensor data
        info = next(i for i in zf.infolist() if i.filename.endswith("data/0"))
    offset = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + 1000
    flipped[offset] ^= 0xFF
    checkpoint_path(tmp_path, 2).write_bytes(bytes(flipped))
    with pytest.warns(UserWarning) as warned:
        path, state = load_latest(tmp_path)
    assert path == checkpoint_path(tmp_path, 1) and state["step"] == 1
    assert any("CRC" in str(w.message) for w in warned)
    with pytest.raises(CheckpointError, match=r"step-000000003\.pt: truncated or corrupt"):
        load_checkpoint(checkpoint_path(tmp_path, 3))
    assert load_latest(tmp_path / "nothing-here") is None


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_pickle_that_would_run_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "step-000000009.pt"
    torch.save({"model": {}, "payload": Exploit()}, path)
    with pytest.raises(CheckpointError, match=r"step-000000009\.pt: refused to load.*weights_only=True"):
        load_checkpoint(path)
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(CheckpointError, match="not a pitstop checkpoint"):
        torch.save(torch.zeros(2), tmp_path / "t.pt")
        load_checkpoint(tmp_path / "t.pt")
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    assert pickle.loads(pickle.dumps(1)) == 1  # the test itself never unpickled the exploit


def test_rng_states_round_trip_through_a_weights_only_checkpoint(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.randn()  # leave a cached gaussian around
    save_checkpoint({"rng": rng_state()}, tmp_path / "r.pt")
    expected = (random.random(), np.random.randn(3).tolist(), torch.rand(3).tolist())
    set_rng_state(load_checkpoint(tmp_path / "r.pt")["rng"])
    assert (random.random(), np.random.randn(3).tolist(), torch.rand(3).tolist()) == expected


def test_fit_checkpoints_hold_everything_and_keep_the_newest(tmp_path):
    model, opt, _, _ = twins(opt="adam")
    fit(model, opt, ce, loader(data(64), 8, shuffle=True), recipe=Recipe(seed=0, precision="fp16-mixed"), epochs=1,
        checkpoint_dir=tmp_path, checkpoint_every=2, keep_checkpoints=2, progress=False,
        scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 3))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000008.pt", "step-000000006.pt"]
    state = load_checkpoint(checkpoint_path(tmp_path, 8))
    assert set(state) >= {"model", "optimizer", "step_state", "scheduler", "step", "epoch", "pos", "rng", "epoch_rng",
                          "recipe"}
    assert (state["step"], state["epoch"], state["pos"]) == (8, 0, 8)  # written after the last step of epoch 0
    assert state["step_state"]["precision"]["scaler"]["scale"] > 0
    assert state["scheduler"]["last_epoch"] == 8
    assert Recipe.from_dict(state["recipe"]) == Recipe(seed=0, precision="fp16-mixed")
    assert all(torch.equal(state["model"][k], v) for k, v in model.state_dict().items())


def test_fit_resumes_from_the_previous_good_checkpoint_when_the_newest_is_corrupt(tmp_path):
    model, opt, _, _ = twins()
    fit(model, opt, ce, loader(data(32), 8), recipe=Recipe(seed=0), epochs=1, checkpoint_dir=tmp_path,
        checkpoint_every=1, progress=False)
    newest = checkpoint_path(tmp_path, 4)
    newest.write_bytes(newest.read_bytes()[:100])
    model, opt, _, _ = twins()
    with pytest.warns(UserWarning, match=r"step-000000004\.pt: truncated or corrupt.*previous one"):
        r = fit(model, opt, ce, loader(data(32), 8), recipe=Recipe(seed=0), epochs=1, checkpoint_dir=tmp_path,
                checkpoint_every=1, progress=False)
    assert r.resumed_from == checkpoint_path(tmp_path, 3) and r.steps == 4


def _plant_exploit(path, legacy: bool = False):
    torch.save({"model": {}, "payload": Exploit()}, path, _use_new_zipfile_serialization=not legacy)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy-format"])
def test_fit_stops_at_a_refused_checkpoint_instead_of_starting_over(tmp_path, monkeypatch, legacy):
    """Review engine 1: a file that would run code is an error naming it, never skipped."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck3").mkdir()
    _plant_exploit(checkpoint_path(tmp_path / "ck3", 1), legacy)
    model, opt, _, _ = twins()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "trying the previous one" warning either
        with pytest.raises(CheckpointError, match=r"ck3/step-000000001\.pt") as err:
            fit(model, opt, ce, loader(data(32), 8), recipe=Recipe(seed=0), epochs=1, checkpoint_dir="ck3",
                progress=False)
    message = str(err.value)
    assert "False" not in message  # torch's advice to turn weights_only off is not relayed
    assert ("refused to load: it needs posix.system" in message) if not legacy else ("zip format" in message)
    assert not (tmp_path / "pwned").exists()
    assert [p.name for p in (tmp_path / "ck3").iterdir()] == ["step-000000001.pt"]  # nothing trained, nothing written


def test_load_latest_never_falls_back_past_a_refused_file_but_does_past_a_torn_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_checkpoint(_state(1.0), checkpoint_path(tmp_path, 1))
    _plant_exploit(checkpoint_path(tmp_path, 2))
    torn = save_checkpoint(_state(3.0), checkpoint_path(tmp_path, 3))
    torn.write_bytes(torn.read_bytes()[:-200])  # the newest is torn: skipped with a warning
    with pytest.warns(UserWarning, match=r"step-000000003\.pt: truncated or corrupt"):
        with pytest.raises(CheckpointError, match=r"step-000000002\.pt: refused to load") as err:
            load_latest(tmp_path)
    assert not isinstance(err.value, CorruptCheckpointError)
    assert "step-000000001.pt" in str(err.value)  # says which file a resume would use once this one is removed
    assert not (tmp_path / "pwned").exists()


def test_an_intact_file_that_fails_to_load_is_an_error_not_a_fallback(tmp_path):
    save_checkpoint(_state(1.0), checkpoint_path(tmp_path, 1))
    with zipfile.ZipFile(checkpoint_path(tmp_path, 2), "w") as zf:  # a complete zip, but no torch archive
        zf.writestr("notes.txt", "hello")
    with pytest.raises(CheckpointError, match=r"step-000000002\.pt: cannot be loaded") as err:
        load_latest(tmp_path)
    assert not isinstance(err.value, CorruptCheckpointError)


def test_latest_checkpoint_checks_the_archive_without_unpickling_or_reading_the_data(tmp_path, monkeypatch):
    """Review engine 3: finding the latest checkpoint reads the zip directory and the member
    headers (a few bytes each), not the tensors."""
    save_checkpoint(_state(1.0), checkpoint_path(tmp_path, 1))
    newest = save_checkpoint(_state(2.0), checkpoint_path(tmp_path, 2))
    whole = newest.read_bytes()
    with zipfile.ZipFile(newest) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("data/0"))
    start = info.header_offset + 1000
    newest.write_bytes(whole[:start] + whole[start + 4096:])  # 4 KiB cut out of the tensor data, directory intact

    def no_load(*args, **kwargs):
        raise AssertionError("latest_checkpoint unpickled a file")

    def no_crc_pass(self):
        raise AssertionError("latest_checkpoint read every member")

    monkeypatch.setattr(torch, "load", no_load)
    monkeypatch.setattr(zipfile.ZipFile, "testzip", no_crc_pass)
    with pytest.warns(UserWarning, match=r"step-000000002\.pt: truncated or corrupt"):
        assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 1)
    read = []
    real_open = open

    def counting_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if "b" in mode and str(file).endswith(".pt"):
            real_read = f.read
            def counted(n=-1):
                chunk = real_read(n)
                read.append(len(chunk))
                return chunk

            f.read = counted
        return f

    import builtins
    monkeypatch.setattr(builtins, "open", counting_open)
    save_checkpoint(_state(3.0), checkpoint_path(tmp_path, 3))
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 3)
    assert 0 < sum(read) < 80 * 1024  # the zip directory at most, never the 256 KiB tensor
