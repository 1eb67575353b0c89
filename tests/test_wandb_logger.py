"""train.logger=wandb: an offline Weights & Biases run beside metrics.jsonl (src/smallinit/train/loggers.py).

No network: WANDB_MODE=offline, every W&B folder inside tmp. The offline run's ``run-<id>.wandb`` file (a
LevelDB-style log of protobuf records, the format ``wandb sync`` uploads) is read back here, so the assertions are
on what W&B actually recorded, compared with the run's own metrics.jsonl."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
from conftest import tiny_overrides

from smallinit.cli import main as cli

pytest.importorskip("wandb")

STEPS = {
    "train.max_steps": 6,
    "train.log_every": 2,
    "train.eval_every": 3,
    "train.ckpt_every": 3,
    "train.compile": "false",
    "train.logger": "wandb",
    "model.gate": "none",
}


@pytest.fixture(scope="module")
def wandb_env(tmp_path_factory):
    """Offline, silent, and nothing of W&B's outside tmp (its settings, cache and data folders included)."""
    home = tmp_path_factory.mktemp("wandb-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        for var, sub in (
            ("WANDB_DIR", "dir"),
            ("WANDB_CONFIG_DIR", "config"),
            ("WANDB_CACHE_DIR", "cache"),
            ("WANDB_DATA_DIR", "data"),
            ("WANDB_ARTIFACT_DIR", "artifacts"),
        ):
            (home / sub).mkdir()
            mp.setenv(var, str(home / sub))
        mp.delenv("WANDB_API_KEY", raising=False)
        mp.delenv("WANDB_RUN_ID", raising=False)
        mp.delenv("WANDB_RESUME", raising=False)
        yield home


@pytest.fixture(scope="module")
def wandb_run(wandb_env, tmp_path_factory, token_dir) -> Path:
    rd = tmp_path_factory.mktemp("wb") / "wb-run"
    assert cli(["train", "--config", "tiny", "--out", str(rd), *tiny_overrides(token_dir, **STEPS)]) == 0
    return rd


# ---- reading an offline run back -------------------------------------------------------------------


def _log_records(path: Path):
    """The payloads of a W&B transaction log: a 7-byte header (":W&B", magic 0xBEE1, version), then LevelDB log
    records (crc32c 4 bytes, length 2, type 1: full / first / middle / last) in 32 KiB blocks."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
        elif kind == 0 and length == 0:  # zero padding to the block's end
            pos += block - pos % block if pos % block else 0


def read_offline_run(folder: Path) -> dict:
    """{"run": the run record, "config": {key: value}, "history": {step: {metric: value}}, "exit": the exit code
    finish() recorded (absent when the run was never finished)} of one offline run."""
    from wandb.proto import wandb_internal_pb2 as pb

    (log,) = folder.glob("run-*.wandb")
    out: dict = {"run": None, "config": {}, "history": {}}
    for payload in _log_records(log):
        rec = pb.Record()
        rec.ParseFromString(payload)
        kind = rec.WhichOneof("record_type")
        if kind in ("run", "config"):  # the config comes with the run record (and any later update)
            if kind == "run":
                out["run"] = rec.run
            for u in (rec.run.config if kind == "run" else rec.config).update:
                out["config"][u.key or ".".join(u.nested_key)] = json.loads(u.value_json)
        elif kind == "exit":  # written by finish()
            out["exit"] = rec.exit.exit_code
        elif kind == "history":
            row = {(i.key or ".".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
            out["history"][int(row.get("_step", rec.history.step.num))] = row
    return out


def offline_runs(rd: Path) -> list[Path]:
    return sorted((rd / "wandb").glob("offline-run-*"))


def metrics(rd: Path) -> list[dict]:
    return [json.loads(line) for line in (rd / "metrics.jsonl").read_text().splitlines()]


# ---- tests ------------------------------------------------------------------------------------------


def test_offline_run_holds_the_runs_own_metrics(wandb_run):
    rd = wandb_run
    rid = json.loads((rd / "wandb.json").read_text())["id"]
    (folder,) = offline_runs(rd)
    assert folder.name.endswith(f"-{rid}")
    got = read_offline_run(folder)
    assert got["run"].run_id == rid
    assert got["run"].project == "smallinit"
    assert got["run"].display_name == rd.name  # train.wandb_run_name "" = the run folder's name
    # the run's full config, as resolved (the data decided the vocabulary)
    assert got["config"]["train"]["logger"] == "wandb"
    assert got["config"]["model"]["d_model"] == 32
    assert got["config"]["model"]["vocab_size"] == 512
    recs = metrics(rd)
    assert [r["step"] for r in recs] == [2, 3, 4, 6]  # log_every 2, eval_every 3, the last step
    assert sorted(got["history"]) == [r["step"] for r in recs]
    for r in recs:
        row = got["history"][r["step"]]
        for k, v in r.items():
            if k != "step":
                assert row[k] == v, (r["step"], k, row.get(k), v)
    assert "val_loss" in got["history"][3] and "val_loss" in got["history"][6]
    assert "val_loss" not in got["history"][2]
    assert got["exit"] == 0  # finished


def test_interrupted_run_is_finished_and_resumed_into_the_same_wandb_run(wandb_env, tmp_path, tiny_cfg):
    """SIGINT at a step boundary: the W&B run is finished (exit 130) before Interrupted propagates; the resumed
    training logs the remaining steps into a W&B run of the same id."""
    import signal

    from smallinit.core.errors import Interrupted
    from smallinit.train.loop import Trainer, resume

    class StopAt:
        def on_step_end(self, trainer, step, record):
            if step == 3:
                trainer._stop_signal = signal.SIGINT  # what the SIGINT handler sets

    rd = tmp_path / "r"
    cfg = tiny_cfg(**{**STEPS, "train.log_every": 1, "train.ckpt_every": 100})
    with pytest.raises(Interrupted):
        Trainer(cfg, rd, callbacks=[StopAt()]).run()
    rid = json.loads((rd / "wandb.json").read_text())["id"]
    (first,) = offline_runs(rd)
    got = read_offline_run(first)
    assert got["exit"] == 130 and sorted(got["history"]) == [1, 2, 3]
    resume(rd)
    first, second = offline_runs(rd)
    got = read_offline_run(second)
    assert got["run"].run_id == rid and got["exit"] == 0
    recs = {r["step"]: r for r in metrics(rd)}
    assert sorted(got["history"]) == [4, 5, 6]
    assert all(got["history"][s]["loss"] == recs[s]["loss"] for s in (4, 5, 6))


def test_resume_continues_the_same_wandb_run(wandb_run):
    rd = wandb_run
    rid = json.loads((rd / "wandb.json").read_text())["id"]
    assert cli(["train", "--resume", str(rd), "--max-steps", "8"]) == 0
    assert json.loads((rd / "wandb.json").read_text())["id"] == rid
    first, second = offline_runs(rd)  # W&B keeps each offline session; `wandb sync` joins them by id
    assert first.name.endswith(f"-{rid}") and second.name.endswith(f"-{rid}")
    got = read_offline_run(second)
    assert got["run"].run_id == rid
    later = [r for r in metrics(rd) if r["step"] > 6]
    assert [r["step"] for r in later] == [8]
    assert sorted(got["history"]) == [8]
    assert got["history"][8]["loss"] == later[0]["loss"]
    assert got["history"][8]["val_loss"] == later[0]["val_loss"]


def test_unknown_logger_is_one_error_line(tmp_path, token_dir, capsys):
    out = tmp_path / "r"
    assert (
        cli(
            [
                "train",
                "--config",
                "tiny",
                "--out",
                str(out),
                *tiny_overrides(token_dir, **{**STEPS, "train.logger": "comet"}),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: train.logger"), err
    assert "none, tensorboard, wandb" in err[0]
    assert not out.exists()


def test_missing_wandb_is_one_error_line_before_training(tmp_path, token_dir, capsys, monkeypatch, wandb_env):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    out = tmp_path / "r"
    assert cli(["train", "--config", "tiny", "--out", str(out), *tiny_overrides(token_dir, **STEPS)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "pip install 'smallinit[wandb]'" in err[0]
    assert not out.exists()  # checked before the run folder is made: nothing trained, nothing written


def test_logger_selection_and_config_checks():
    from smallinit.core.errors import ConfigError
    from smallinit.runs.rundir import IGNORED_IN_COMPARISON
    from smallinit.train import load_config
    from smallinit.train.loggers import MetricLogger, TensorBoardLogger, WandbLogger, selected

    def sel(*o):
        return selected(load_config("tiny", list(o)).train)

    assert sel() == []
    assert sel("train.logger=tensorboard") == ["tensorboard"]
    assert sel("train.tensorboard=true") == ["tensorboard"]  # the older switch still works
    assert sel("train.tensorboard=true", "train.logger=wandb") == ["tensorboard", "wandb"]
    assert sel("train.logger=wandb") == ["wandb"]
    with pytest.raises(ConfigError, match="train.wandb_project"):
        load_config("tiny", ["train.wandb_project=a/b"])
    with pytest.raises(ConfigError, match="train.logger"):
        load_config("tiny", ["train.logger=mlflow"])
    # how a run is watched is not what it learns: never a difference between two runs' configs
    assert {"train.logger", "train.wandb_project", "train.wandb_run_name", "train.wandb_entity"} <= set(
        IGNORED_IN_COMPARISON
    )
    for cls in (TensorBoardLogger, WandbLogger):
        assert all(callable(getattr(cls, m, None)) for m in ("log", "close"))
    assert isinstance(type("L", (), {"log": lambda s, step, m: None, "close": lambda s, code=0: None})(), MetricLogger)


def test_tensorboard_behind_the_same_interface(tmp_path, token_dir):
    """train.tensorboard=true (unchanged) and train.logger=tensorboard both write the logged scalars to tb/."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for i, extra in enumerate(({"train.tensorboard": "true", "train.logger": "none"}, {"train.logger": "tensorboard"})):
        rd = tmp_path / f"tb{i}"
        assert (
            cli(
                [
                    "train",
                    "--config",
                    "tiny",
                    "--out",
                    str(rd),
                    *tiny_overrides(token_dir, **{**STEPS, "train.max_steps": 4, **extra}),
                ]
            )
            == 0
        )
        assert not (rd / "wandb").exists() and not (rd / "wandb.json").exists()
        ea = EventAccumulator(str(rd / "tb"))
        ea.Reload()
        recs = metrics(rd)
        assert {e.step: e.value for e in ea.Scalars("loss")} == pytest.approx({r["step"]: r["loss"] for r in recs})
        assert [e.step for e in ea.Scalars("val_loss")] == [3, 4]
