"""Reading a family of run directories for a scaling analysis (``smallinit scaling``).

:func:`runs_table` turns each run directory into a :class:`RunPoint`: non-embedding parameters N, the final
validation loss, the resolved config, and what decides whether two runs' losses are comparable (tokenizer, data,
token budget); :func:`check_comparable` refuses a family that mixes tokenizers or data. The fit and the analysis
over these points are in :mod:`smallinit.analysis.scaling`, which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RunPoint", "runs_table", "config_value", "check_comparable"]


@dataclass
class RunPoint:
    """One run's point for a scaling fit.

    N: non-embedding parameters (``summary.json``; else counted from the config of the latest
    checkpoint or of ``config.yaml``). loss: ``summary.json`` ``final_val_loss``; else the last
    ``val_loss`` in ``metrics.jsonl`` (then ``completed`` is False and ``note`` says so); None when
    the run has no validation loss at all. config: the resolved run config (nested dict).
    """

    run: str
    N: int
    loss: float | None
    step: int | None
    completed: bool
    config: dict[str, Any]
    note: str = ""
    tokenizer: str | None = None
    """The run's tokenizer.json, canonical form (None when the run has none)."""
    data: tuple[str, str] | None = None
    """(identity, shown name) of the data it trained and validated on (meta.json fingerprint, else the path)."""
    tokens: int | None = None
    """Tokens trained on (summary.json, else step × batch × seq_len)."""


def _has_key(config: dict[str, Any], key: str) -> bool:
    try:
        config_value(config, key)
    except KeyError:
        return False
    return True


def config_value(config: dict[str, Any], key: str) -> Any:
    """The value at a dotted ``key`` (``model.gamma``) of a nested config dict; KeyError when absent."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def _count_non_embedding(model_cfg: dict[str, Any]) -> int:
    """Non-embedding parameters of the model a config describes (counted from the config: no weights built)."""
    from smallinit.model import ModelConfig

    return int(ModelConfig.from_dict(model_cfg).num_params(non_embedding=True))


def runs_table(run_dirs: list[Any]) -> list[RunPoint]:
    """A :class:`RunPoint` (N, final val loss, config) per run directory, in the order given.

    Raises:
        RunDirError: a path is not a run directory (no config.yaml) or its config/summary is unreadable.
    """
    from pathlib import Path

    from smallinit.core.errors import RunDirError
    from smallinit.runs.rundir import last_val_loss, read_config, read_json

    out = []
    for rd in run_dirs:
        rd = Path(rd)
        config = read_config(rd)
        summary: dict[str, Any] = read_json(rd / "summary.json", strict=True) or {}
        if not isinstance(summary, dict):
            raise RunDirError(f"{rd / 'summary.json'}: not a JSON object (repair it with `smallinit doctor {rd}`)")
        note = ""
        loss = summary.get("final_val_loss")
        step = summary.get("step")
        completed = bool(summary.get("completed", False))
        if loss is None:
            loss, step = last_val_loss(rd)
            completed = False
            note = (
                "no summary.json (run incomplete?): " if not summary else "summary.json has no final_val_loss: "
            ) + (f"using the last val_loss in metrics.jsonl (step {step})" if loss is not None else "no val_loss found")
        N = summary.get("non_embedding_params")
        if N is None:
            model_cfg = config.get("model")
            try:
                from smallinit.runs.checkpoint import latest_good_checkpoint, read_checkpoint

                ckpt = latest_good_checkpoint(rd)
                if ckpt is not None:
                    model_cfg = read_checkpoint(ckpt)["config"].get("model", model_cfg)
                N = _count_non_embedding(model_cfg)
            except (ValueError, TypeError, AttributeError) as e:
                raise RunDirError(f"{rd}: cannot count non-embedding parameters from its config ({e})") from None
        try:
            loss = None if loss is None else float(loss)
        except (TypeError, ValueError):
            raise RunDirError(f"{rd / 'summary.json'}: final_val_loss {loss!r} is not a number") from None
        out.append(
            RunPoint(
                run=str(rd),
                N=int(N),
                loss=loss,
                step=None if step is None else int(step),
                completed=completed,
                config=config,
                note=note,
                tokenizer=_tokenizer_of(rd),
                data=_data_identity(config),
                tokens=_tokens_of(summary, config, step),
            )
        )
    return out


def _tokenizer_of(rd) -> str | None:
    from smallinit.analysis.compare import _canonical_tokenizer

    p = rd / "tokenizer.json"
    return _canonical_tokenizer(p) if p.is_file() else None


def _data_identity(config: dict[str, Any]) -> tuple[str, str] | None:
    """(fingerprint, path) of a run's data.path: its meta.json's token counts, vocabulary, sources and seed when
    readable (copies of the same data agree), else the resolved path."""
    import json
    from pathlib import Path

    path = (config.get("data") or {}).get("path")
    if not path:
        return None
    try:
        m = json.loads((Path(path) / "meta.json").read_text())
        key = json.dumps(
            [
                m.get("tokens"),
                m.get("vocab_size"),
                m.get("seed"),
                m.get("val_fraction"),
                [s.get("name") for s in m.get("sources", [])],
            ],
            sort_keys=True,
        )
    except (OSError, ValueError, AttributeError, TypeError):
        key = str(Path(path).resolve())
    return key, str(path)


def _tokens_of(summary: dict[str, Any], config: dict[str, Any], step: int | None) -> int | None:
    if isinstance(summary.get("tokens"), int):
        return summary["tokens"]
    try:
        return int(step) * int(config["train"]["batch_size"]) * int(config["data"]["seq_len"])
    except (TypeError, KeyError, ValueError):
        return None


def check_comparable(points: list) -> list[str]:
    """DataError when the runs used different tokenizers or different data (their losses are then in different
    units, as ``compare`` refuses); returns notes flagging different token budgets."""
    from smallinit.core.errors import DataError

    toks: dict[str, list[str]] = {}
    for p in points:
        if getattr(p, "tokenizer", None) is not None:
            toks.setdefault(p.tokenizer, []).append(p.run)
    if len(toks) > 1:
        groups = "; ".join(f"{', '.join(runs[:3])}{' ...' if len(runs) > 3 else ''}" for runs in toks.values())
        raise DataError(
            f"the runs use {len(toks)} different tokenizers ({groups}): their losses are in different "
            "units and no scaling fit across them means anything; fit each tokenizer's runs separately"
        )
    data: dict[str, str] = {}
    for p in points:
        if getattr(p, "data", None) is not None:
            data.setdefault(p.data[0], p.data[1])
    if len(data) > 1:
        raise DataError(
            f"the runs trained and validated on different data ({', '.join(sorted(data.values()))}): "
            "their losses are not comparable; fit each data set's runs separately"
        )
    budgets = sorted({p.tokens for p in points if getattr(p, "tokens", None)})
    if len(budgets) > 1:
        return [
            f"the runs trained on different token budgets ({budgets[0]:,} … {budgets[-1]:,} tokens): a gain "
            "then mixes model size with training length"
        ]
    return []
