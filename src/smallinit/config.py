"""Run configuration: typed dataclasses (model, data, optim, train, probe), named YAML configs, dotted overrides.

    cfg = load_config("small", ["model.gamma=0.5", "optim.lr=3e-3"])   # config name or YAML path
    save_config(cfg, run_dir / "config.yaml")

Unknown keys and wrongly typed values raise :class:`~smallinit.core.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from smallinit.core.errors import ConfigError
from smallinit.model.config import ModelConfig, MoEConfig

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@dataclass
class DataConfig:
    """Where the tokens come from and how windows are cut."""

    path: str = "data/stdlib"
    """A directory written by ``smallinit prepare`` (tokenizer.json, train.bin, val.bin, meta.json)."""
    seq_len: int = 256
    """Tokens per training window (the model's max_seq_len is raised to at least this)."""
    bos: bool = False
    """Start every window with the BOS token (sinks form most readily on an always-first token)."""
    val_batches: int = 16
    """Validation batches (of train.batch_size windows, in a fixed order) behind the reported ``val_loss``."""
    tune_batches: int = 0
    """Further validation batches, disjoint from the reported ones, behind ``tune_loss`` (for LR selection)."""


@dataclass
class OptimConfig:
    """AdamW and the learning-rate schedule."""

    lr: float = 3e-3
    """Peak learning rate."""
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    """Decoupled weight decay on matrices; norm gains and biases never decay."""
    decay_embeddings: bool = False
    """Whether the token embedding (and a tied/untied head) gets weight decay."""
    schedule: str = "cosine"
    """"cosine" (warmup then cosine to min_lr), "wsd" (warmup, stable, then linear decay), or "constant"."""
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of ``lr``."""
    decay_fraction: float = 0.2
    """WSD only: fraction of max_steps spent in the final decay."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value (0 = no clipping)."""


@dataclass
class TrainConfig:
    """The loop: budget, batch, precision, logging, checkpoints, parallelism."""

    max_steps: int = 1000
    batch_size: int = 16
    """Global batch in sequences per optimizer step, whatever the world size."""
    micro_batch_size: int = 0
    """Sequences per forward pass on one process (0 = batch_size / world_size, no accumulation)."""
    seed: int = 0
    """Seeds the init draw and the data order (each step's batch is drawn from ``default_rng([seed, step])``)."""
    dtype: str = "auto"
    """"auto", "fp32" or "bf16" (autocast; parameters, norms, softmax statistics, the loss and the optimizer state
    stay float32). "auto": bf16 where the device has native bf16 and a start-up measurement at the run's own shape
    shows it faster, else fp32 — decided once per run, saved in config.yaml (:mod:`smallinit.train.precision`)."""
    compile: bool | str = "auto"
    """Wrap the model in ``torch.compile``: true, false, or "auto" (on only where the run is long enough to repay
    the compile; the rule and its measurement: :func:`smallinit.train.compile.resolve_compile`)."""
    device: str = "auto"
    """"auto" (cuda if available, else cpu), "cpu" or "cuda"."""
    log_every: int = 10
    eval_every: int = 100
    ckpt_every: int = 500
    keep_ckpts: int = 2
    """Checkpoints kept on disk (the newest ones)."""
    ckpt_steps: list[int] = field(default_factory=list)
    """Further steps at which a checkpoint is always written and never pruned (cooldown branches start there)."""
    logger: str = "none"
    """Experiment tracker beside metrics.jsonl (rank 0 only; :mod:`smallinit.train.loggers`): "none",
    "tensorboard" (RUN_DIR/tb/) or "wandb" (Weights & Biases: RUN_DIR/wandb/, the same W&B run continued by
    ``--resume``; its mode comes from the environment, e.g. WANDB_MODE=offline; needs ``pip install
    'smallinit[wandb]'``)."""
    tensorboard: bool = False
    """Also log to TensorBoard (RUN_DIR/tb/), whatever ``logger`` says (the older switch; same as
    ``logger=tensorboard``)."""
    wandb_project: str = "smallinit"
    """W&B project (``logger=wandb``)."""
    wandb_run_name: str = ""
    """W&B run name ("" = the run folder's name)."""
    wandb_entity: str = ""
    """W&B entity, a user or team ("" = W&B's default for the logged-in user)."""
    progress: bool = True
    """Show progress (rank 0 only): a bar when stderr is a terminal, else a plain line every
    ``progress_seconds`` (and at the first, evaluated and last steps)."""
    progress_seconds: float = 30.0
    """Seconds between plain progress lines when stderr is not a terminal (a log file)."""
    diverge_margin: float = 3.0
    """Divergence watch: a step's loss counts as diverged when it exceeds ln(vocab_size) + this margin (nats)."""
    diverge_steps: int = 10
    """Stop the run (like a NaN) after this many consecutive diverged steps; 0 turns the watch off."""
    parallel: str = "none"
    """"none", "ddp" or "fsdp" (FSDP2 fully_shard per block plus root); launch with torchrun."""
    threads: int = 0
    """torch intra-op threads (0 = PyTorch's default)."""


@dataclass
class ProbeConfig:
    """Training-time probes (condensation, sinks, norm saturation, residual flow); see smallinit.probes."""

    every: int = 0
    """Probe every k steps (0 = off). Step 0, the last step and (with ``early``) the log-spaced steps 1, 2, 5, 10,
    20, 50, … below ``every`` are always probed when on."""
    early: bool = True
    """Also probe the log-spaced early steps (condensation happens in the first updates, DESIGN.md §2)."""
    batch_size: int = 4
    """Sequences in the fixed probe batch (taken from the validation split)."""
    heatmaps: list[str] = field(default_factory=lambda: ["blocks.0.attn.q", "blocks.0.mlp.up"])
    """Matrices whose row-cosine heatmaps are saved at log-spaced steps."""
    exact_srank: bool = False
    """Exact (SVD) stable rank instead of power iteration."""


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(dataclasses.asdict(self))

    def validate(self) -> None:
        """ConfigError naming the first impossible value: every number finite (NaN or inf would silently switch a
        safeguard off: clipping, the divergence watch, weight decay), counts and rates in range, names known."""
        t, o, d = self.train, self.optim, self.data
        for sec in ("data", "optim", "train", "probe"):
            for f in dataclasses.fields(getattr(self, sec)):
                v = getattr(getattr(self, sec), f.name)
                if any(
                    isinstance(x, float) and not math.isfinite(x) for x in (v if isinstance(v, (list, tuple)) else [v])
                ):
                    raise ConfigError(f"{sec}.{f.name} must be a finite number, got {v!r}")
        positive = {
            "train.max_steps": t.max_steps,
            "train.batch_size": t.batch_size,
            "train.log_every": t.log_every,
            "train.eval_every": t.eval_every,
            "train.ckpt_every": t.ckpt_every,
            "train.keep_ckpts": t.keep_ckpts,
            "data.seq_len": d.seq_len,
            "data.val_batches": d.val_batches,
            "probe.batch_size": self.probe.batch_size,
        }
        for k, v in positive.items():
            if v <= 0:
                raise ConfigError(f"{k} must be > 0, got {v}")
        for k, v in {
            "train.micro_batch_size": t.micro_batch_size,
            "data.tune_batches": d.tune_batches,
            "optim.warmup_steps": o.warmup_steps,
            "probe.every": self.probe.every,
            "train.threads": t.threads,
            "optim.weight_decay": o.weight_decay,
            "optim.eps": o.eps,
            "optim.grad_clip": o.grad_clip,
            "train.diverge_steps": t.diverge_steps,
            "train.diverge_margin": t.diverge_margin,
            "train.progress_seconds": t.progress_seconds,
        }.items():
            if v < 0:
                raise ConfigError(f"{k} must be >= 0, got {v}")
        if not 0 <= t.seed < 2**63:  # numpy's default_rng([seed, step]) takes non-negative 64-bit words
            raise ConfigError(f"train.seed must be an integer in [0, 2^63), got {t.seed}")
        if not (o.lr > 0 and math.isfinite(o.lr)):
            raise ConfigError(f"optim.lr must be a finite number > 0, got {o.lr}")
        if not 0 <= o.min_lr_ratio <= 1:
            raise ConfigError(f"optim.min_lr_ratio must be in [0, 1], got {o.min_lr_ratio}")
        if not 0 < o.decay_fraction <= 1:
            raise ConfigError(f"optim.decay_fraction must be in (0, 1], got {o.decay_fraction}")
        if not all(0 <= b < 1 for b in o.betas) or len(o.betas) != 2:
            raise ConfigError(f"optim.betas must be two numbers in [0, 1), got {list(o.betas)}")
        choices = {
            "optim.schedule": (o.schedule, ("cosine", "wsd", "constant")),
            "train.dtype": (t.dtype, ("auto", "fp32", "bf16")),
            "train.device": (t.device, ("auto", "cpu", "cuda")),
            "train.parallel": (t.parallel, ("none", "ddp", "fsdp")),
            "train.logger": (t.logger, ("none", "tensorboard", "wandb")),
        }
        for k, (v, allowed) in choices.items():
            if v not in allowed:
                raise ConfigError(f"{k}: unknown value {v!r}; choose one of {', '.join(allowed)}")
        if not isinstance(t.compile, bool) and t.compile != "auto":
            raise ConfigError(f"train.compile: unknown value {t.compile!r}; choose one of true, false, auto")
        if not t.wandb_project or any(ch in t.wandb_project for ch in "/\\#?%:"):
            raise ConfigError(
                f"train.wandb_project must be a non-empty name without / \\ # ? % :, got {t.wandb_project!r}"
            )
        if any(s <= 0 for s in t.ckpt_steps):
            raise ConfigError(f"train.ckpt_steps must be steps > 0, got {list(t.ckpt_steps)}")
        if t.micro_batch_size and t.batch_size % t.micro_batch_size:
            raise ConfigError(
                f"train.micro_batch_size={t.micro_batch_size} does not divide train.batch_size={t.batch_size}"
            )
        try:
            self.model.validate()
        except ValueError as e:
            raise ConfigError(str(e).replace("ModelConfig.", "model.")) from None


def _to_plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _to_plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_plain(v) for v in x]
    return x


# ---- typed construction ------------------------------------------------------------------------


def _hint_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp`` (ints widen to floats; tuples from lists)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(key, value, a)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{key}: expected {' or '.join(_hint_name(a) for a in args)}, got {value!r}")
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin in (tuple,):
        if isinstance(value, (list, tuple)) and (len(args) == len(value) or (len(args) == 2 and args[1] is Ellipsis)):
            elem = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
            return tuple(_coerce(f"{key}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, elem)))
    elif origin is list:
        if isinstance(value, (list, tuple)):
            return [_coerce(f"{key}[{i}]", v, args[0] if args else Any) for i, v in enumerate(value)]
    elif origin is dict:
        if isinstance(value, dict):
            return dict(value)
    elif dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, dict):
            return _build(tp, value, key)
    raise ConfigError(f"{key}: expected {_hint_name(tp) if origin is None else str(tp)}, got {value!r}")


def _build(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in values.items():
        key = f"{prefix}.{k}" if prefix else k
        if k not in names:
            raise ConfigError(f"unknown config key {key!r}; known keys here: {', '.join(sorted(names))}")
        kwargs[k] = _coerce(key, v, hints[k])
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e).replace("ModelConfig.", "model.")) from None


def config_from_dict(d: dict[str, Any]) -> RunConfig:
    """A validated :class:`RunConfig` from nested plain data (as in a YAML file)."""
    if not isinstance(d, dict):
        raise ConfigError(f"a config must be a mapping of sections, got {type(d).__name__}")
    cfg = _build(RunConfig, d)
    cfg.validate()
    return cfg


def parse_value(text: str) -> Any:
    """An override's value parsed as YAML (``1e-12`` → float, ``true`` → bool, ``[1,2]`` → list)."""
    try:
        v = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(v, str):  # YAML 1.1 reads "1e-12" as a string; accept plain float syntax
        try:
            return float(v) if any(c in v for c in ".eE") or v.lower() in ("inf", "nan") else v
        except ValueError:
            return v
    return v


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` strings to a nested dict (new dict; the input is not changed)."""
    import copy

    d = copy.deepcopy(d)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        key, _, raw = item.partition("=")
        set_dotted(d, key.strip(), parse_value(raw), what="override key")
    return d


def set_dotted(d: dict[str, Any], key: str, value: Any, what: str = "key") -> None:
    """d[a][b][c] = value for the dotted key "a.b.c", creating sections; ConfigError names a bad key."""
    parts = key.split(".")
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"{what} {key!r} must be dotted, like model.gamma")
    node = d
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{what} {key!r}: {p!r} is not a section")
    node[parts[-1]] = value


def config_names() -> list[str]:
    """The named configs: the stems of ``configs/*.yaml`` (tiny, small, ..., 0.1b, ...)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


preset_names = config_names
"""The old name of :func:`config_names`, kept so that existing code still runs."""


def read_config_file(name_or_path: str | os.PathLike, _chain: tuple[str, ...] = ()) -> dict[str, Any]:
    """A config name (``configs/<name>.yaml``) or a YAML path → nested dict (with ``base:`` inheritance;
    a ``base:`` chain that comes back to a file already in it is a ConfigError)."""
    p = Path(name_or_path)
    if not p.is_file():
        named = CONFIG_DIR / f"{name_or_path}.yaml"
        if named.is_file():
            p = named
        elif p.suffix in (".yaml", ".yml") or os.sep in str(name_or_path):
            raise ConfigError(f"config file not found: {p}")
        else:
            raise ConfigError(f"unknown config {str(name_or_path)!r}; configs: {', '.join(config_names())}")
    try:
        d = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{p}: a config must be a mapping of sections")
    base = d.pop("base", None)
    if base:
        key = str(p.resolve())
        if key in _chain:
            names = " -> ".join(Path(c).name for c in (*_chain[_chain.index(key) :], key))
            raise ConfigError(f"{p}: base: chain loops back on itself ({names})")
        if not isinstance(base, (str, os.PathLike)):
            raise ConfigError(f"{p}: base: must be a config name or a YAML path, got {base!r}")
        parent = read_config_file(_base_path(p, base), (*_chain, key))
        d = _merge(parent, d)
    return d


def _base_path(p: Path, base: str | os.PathLike) -> Path:
    """Where the ``base:`` of the YAML file ``p`` lives: a relative path is read from ``p``'s own folder, never from
    the current one (a stray file of the same name there used to be loaded silently); a bare name (no .yaml/.yml,
    no folder) is a named config, or failing that a file of that name beside ``p``."""
    b = Path(base)
    if b.is_absolute():
        return b
    beside = p.parent / b
    if b.suffix in (".yaml", ".yml") or os.sep in str(base) or "/" in str(base):
        if not beside.is_file():
            raise ConfigError(
                f"{p}: base: {str(base)!r} not found as {beside} (a relative base: is read from the "
                f"folder of the YAML that names it)"
            )
        return beside
    # a bare name (config names include dotted ones such as 0.1b)
    named = CONFIG_DIR / f"{base}.yaml"
    if named.is_file():
        return named
    if beside.is_file():
        return beside
    raise ConfigError(
        f"{p}: base: {str(base)!r} is neither a config name ({', '.join(config_names())}) nor a file beside it"
    )


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(
    name_or_path: str | os.PathLike | None = None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
) -> RunConfig:
    """Config name/YAML (or a dict) plus dotted overrides → validated RunConfig. ``model.preset: NAME`` (the key
    keeps its old name) names a model size of :data:`~smallinit.model.config.SIZES`, whose fields come first."""
    d = dict(base or {})
    if name_or_path is not None:
        d = _merge(d, read_config_file(name_or_path))
    d = apply_overrides(d, overrides or [])
    size = d.get("model", {}).pop("preset", None) if isinstance(d.get("model"), dict) else None
    if size:
        from smallinit.model.config import SIZES

        if size not in SIZES:
            raise ConfigError(f"model.preset: unknown model size {size!r}; choose one of {', '.join(SIZES)}")
        # the size's own fields (not derived ones such as n_kv_heads), so overrides re-derive them
        d["model"] = _merge(SIZES[size], d["model"])
    return config_from_dict(d)


def save_config(cfg: RunConfig, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML, atomically."""
    from smallinit.core.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def config_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two nested config dicts."""
    out = {}
    for k in sorted(set(a) | set(b)):
        key = f"{prefix}{k}"
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out.update(config_diff(va, vb, key + "."))
        elif va != vb:
            out[key] = (va, vb)
    return out


__all__ = [
    "CONFIG_DIR",
    "DataConfig",
    "MoEConfig",
    "OptimConfig",
    "ProbeConfig",
    "RunConfig",
    "TrainConfig",
    "apply_overrides",
    "config_diff",
    "config_from_dict",
    "config_names",
    "load_config",
    "parse_value",
    "preset_names",
    "read_config_file",
    "save_config",
]
