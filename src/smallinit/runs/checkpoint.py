"""Checkpoints: one directory per step, written atomically, verified by SHA-256 on load.

Layout of ``RUN_DIR/checkpoints/step_00000500/``::

    model.safetensors   full (unsharded) model weights; a tied LM head is stored once, as tok_emb.weight
    optim.pt            AdamW state keyed by parameter name, plus RNG states (loaded with weights_only=True)
    state.json          step, tokens seen, data-loader state, wall time
    config.yaml         the run's resolved config
    manifest.json       {"step": N, "files": {name: {"sha256": ..., "bytes": ...}}} — written last

The directory is assembled under a temporary name and renamed into place, so a crash mid-write never
leaves something that looks complete; ``manifest.json`` checksums catch later corruption. Nothing in a
checkpoint can execute code when loaded (safetensors, JSON, YAML, ``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml

from smallinit.core.errors import CheckpointError
from smallinit.core.io import fsync_dir, sha256_file

CKPT_SUBDIR = "checkpoints"
MANIFEST = "manifest.json"


def ckpt_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it. Every checkpoint byte goes through here (fault tests patch it).

    ``SMALLINIT_FAULT_WRITE_LIMIT=N`` (for fault-injection tests) makes writes fail with ENOSPC once N
    bytes have been written by this process.
    """
    limit = os.environ.get("SMALLINIT_FAULT_WRITE_LIMIT")
    if limit is not None:
        _write_file.written = getattr(_write_file, "written", 0)
        room = int(limit) - _write_file.written
        if room < len(data):
            with open(path, "wb") as f:
                f.write(data[: max(room, 0)])
            _write_file.written += max(room, 0)
            raise OSError(28, "No space left on device", str(path))
        _write_file.written += len(data)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    model_state: dict[str, torch.Tensor],
    optim_state: dict[str, Any],
    state: dict[str, Any],
    config: dict[str, Any],
    keep: int | None = None,
    tied_keys: tuple[str, ...] = (),
    keep_steps: tuple[int, ...] = (),
) -> Path:
    """Write a complete checkpoint for ``step``; keep only the newest ``keep`` ones, plus those of the steps in
    ``keep_steps`` (never pruned: cooldown branches start from them). Returns its path.

    On any failure (e.g. a full disk) the partial directory is removed and the previous checkpoints
    are left untouched; the error propagates as :class:`CheckpointError`.
    """
    from safetensors.torch import save as st_save

    root = Path(run_dir) / CKPT_SUBDIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / ckpt_dir_name(step)
    tmp = root / f".tmp-{ckpt_dir_name(step)}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in model_state.items() if k not in tied_keys}
        buf = io.BytesIO()
        torch.save(optim_state, buf)
        files = {
            "model.safetensors": st_save(tensors, metadata={"step": str(step)}),
            "optim.pt": buf.getvalue(),
            "state.json": (json.dumps({**state, "step": step}, indent=2) + "\n").encode(),
            "config.yaml": yaml.safe_dump(config, sort_keys=False).encode(),
        }
        manifest: dict[str, Any] = {"step": step, "files": {}}
        for name, data in files.items():
            _write_file(tmp / name, data)
            manifest["files"][name] = {"sha256": sha256_file(tmp / name), "bytes": len(data)}
        _write_file(tmp / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
        fsync_dir(tmp)
        if final.exists():  # re-saving the same step (e.g. after resume): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(root)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not write checkpoint {final}: {e.strerror or e}") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    complete = list_checkpoints(run_dir)
    protected = {ckpt_dir_name(s) for s in keep_steps}
    if keep and len(complete) > keep:
        # everything older than the newest `keep` complete ones, incomplete leftovers of a killed prune included
        for old in sorted(root.glob("step_*")):
            if old.is_dir() and old.name < complete[-keep].name and old.name not in protected:
                (old / MANIFEST).unlink(missing_ok=True)  # incomplete at once, whatever rmtree's order
                shutil.rmtree(old, ignore_errors=True)
    return final


def remove_partial_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Delete ``checkpoints/.tmp-*`` directories left by a process killed mid-write; returns what was removed.
    Call only while holding the run's lock (no other writer)."""
    root = Path(run_dir) / CKPT_SUBDIR
    stale = sorted(root.glob(".tmp-step_*")) if root.is_dir() else []
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint directories (those with a manifest), oldest first."""
    root = Path(run_dir) / CKPT_SUBDIR
    if not root.is_dir():
        return []
    dirs = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_") and (p / MANIFEST).is_file()]
    return sorted(dirs, key=lambda p: p.name)


def verify_checkpoint(ckpt: str | os.PathLike) -> dict[str, Any]:
    """Check every file against the manifest's SHA-256; return the manifest or raise CheckpointError naming the file."""
    ckpt = Path(ckpt)
    mpath = ckpt / MANIFEST
    try:
        manifest = json.loads(mpath.read_text())
        files = manifest["files"]
    except FileNotFoundError:
        raise CheckpointError(f"{ckpt}: not a checkpoint (no {MANIFEST})") from None
    except (ValueError, KeyError, TypeError):
        raise CheckpointError(f"{mpath}: manifest is corrupted") from None
    for name, info in files.items():
        p = ckpt / name
        if not p.is_file():
            raise CheckpointError(f"{p}: file missing from checkpoint")
        if p.stat().st_size != info.get("bytes"):
            raise CheckpointError(
                f"{p}: size {p.stat().st_size} != {info.get('bytes')} recorded (truncated or altered)"
            )
        if sha256_file(p) != info.get("sha256"):
            raise CheckpointError(f"{p}: checksum mismatch (file corrupted)")
    return manifest


def latest_good_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest checkpoint that verifies; corrupted newer ones are skipped with a warning naming them."""
    for ckpt in reversed(list_checkpoints(run_dir)):
        try:
            verify_checkpoint(ckpt)
            return ckpt
        except CheckpointError as e:
            warnings.warn(f"skipping bad checkpoint: {e}", stacklevel=2)
    return None


def resolve_checkpoint(path: str | os.PathLike, step: int | None = None) -> Path:
    """A checkpoint directory from a run directory (latest good, or ``step``) or a checkpoint directory."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{p}: no such run or checkpoint directory")
    if (p / MANIFEST).is_file():
        return p
    if step is not None:
        c = p / CKPT_SUBDIR / ckpt_dir_name(step)
        if not (c / MANIFEST).is_file():
            have = ", ".join(str(int(x.name[5:])) for x in list_checkpoints(p)) or "none"
            raise CheckpointError(f"{p}: no checkpoint at step {step} (have: {have})")
        return c
    c = latest_good_checkpoint(p)
    if c is None:
        raise CheckpointError(f"{p}: no complete, uncorrupted checkpoint found")
    return c


def read_checkpoint(ckpt: str | os.PathLike, verify: bool = True) -> dict[str, Any]:
    """Verified contents: {"model": tensors, "optim": dict, "state": dict, "config": dict, "path": Path}."""
    from safetensors.torch import load_file

    ckpt = Path(ckpt)
    if verify:
        verify_checkpoint(ckpt)
    loaders = {
        "model.safetensors": lambda p: load_file(str(p)),
        # weights_only: tensors and plain containers only; anything else is refused, never executed
        "optim.pt": lambda p: torch.load(p, map_location="cpu", weights_only=True),
        "state.json": lambda p: json.loads(p.read_text()),
        "config.yaml": lambda p: yaml.safe_load(p.read_text()),
    }
    out: dict[str, Any] = {}
    for name, load in loaders.items():
        p = ckpt / name
        try:
            out[name] = load(p)
        except pickle.UnpicklingError:
            raise CheckpointError(
                f"{p}: refused: it holds objects other than tensors and plain data (loading it could run code)"
            ) from None
        except Exception as e:  # noqa: BLE001 - any failure to parse the file means a bad checkpoint
            first = (str(e).splitlines() or [""])[0][:200]
            raise CheckpointError(f"{p}: unreadable ({type(e).__name__}: {first})") from None
        if name != "model.safetensors" and not isinstance(out[name], dict):
            raise CheckpointError(f"{p}: expected a mapping, got {type(out[name]).__name__}")
    return {
        "model": out["model.safetensors"],
        "optim": out["optim.pt"],
        "state": out["state.json"],
        "config": out["config.yaml"],
        "path": ckpt,
    }


def model_from_state(config: dict[str, Any], tensors: dict[str, torch.Tensor], map_location="cpu"):
    """Build a Transformer from a config dict (``{"model": ...}`` or a model dict) and load ``tensors`` into it."""
    from smallinit.model import ModelConfig, Transformer

    mcfg = config.get("model", config)
    try:
        cfg = ModelConfig.from_dict(mcfg)
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"checkpoint config is invalid: {e}") from None
    with torch.device("meta"):
        model = Transformer(cfg, init=False)  # structure only: every weight comes from the checkpoint
    model = model.to_empty(device=map_location)
    model.rope.reset_parameters()  # the RoPE tables are not saved: compute them on the target device
    if cfg.tie_embeddings:
        model.lm_head.weight = model.tok_emb.weight
    expected = set(model.state_dict()) - ({"lm_head.weight"} if cfg.tie_embeddings else set())
    got = set(tensors)
    if got != expected:
        missing, extra = sorted(expected - got)[:5], sorted(got - expected)[:5]
        raise CheckpointError(f"weights do not match the config (missing {missing}, unexpected {extra})")
    for k, v in model.state_dict().items():
        if k in tensors and tuple(tensors[k].shape) != tuple(v.shape):
            raise CheckpointError(f"weight {k} has shape {tuple(tensors[k].shape)}, config expects {tuple(v.shape)}")
    model.load_state_dict(tensors, strict=False)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.tok_emb.weight
    return model


def load_checkpoint(path: str | os.PathLike, map_location: str = "cpu", step: int | None = None):
    """A :class:`~smallinit.model.Transformer` (in eval mode) from a run directory (latest good checkpoint, or
    ``step``) or a checkpoint directory."""
    data = read_checkpoint(resolve_checkpoint(path, step))
    model = model_from_state(data["config"], data["model"], map_location)
    model.eval()
    return model


def load_run_tokenizer(path: str | os.PathLike):
    """The ``tokenizers.Tokenizer`` a run trained with (``RUN_DIR/tokenizer.json``, also found from a checkpoint
    dir)."""
    from tokenizers import Tokenizer

    p = Path(path)
    for cand in (p / "tokenizer.json", p.parent.parent / "tokenizer.json"):
        if cand.is_file():
            return Tokenizer.from_file(str(cand))
    raise CheckpointError(f"{p}: no tokenizer.json in the run directory")
