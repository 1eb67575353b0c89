"""``train.dtype``: float32, or bf16 autocast where the device has native bf16 *and* it measured faster.

``train.dtype = "auto"`` (the default) resolves once per run, before the model is built, to

    bf16  ⇔  the device has native bf16          CUDA: torch.cuda.is_bf16_supported();
                                                  CPU: ``avx512_bf16`` or ``amx_bf16`` among the /proc/cpuinfo flags
         and a forward + backward step of the run's own model at its own micro-batch × seq_len took
             t_fp32 / t_bf16 ≥ MIN_SPEEDUP (1.05) — bf16 costs precision, so a tie stays float32
    fp32  otherwise (a CPU without those flags gets fp32 without any measurement: bf16 matmuls are emulated there)

The measurement (:func:`measure_step_seconds`): the run's model built at a fixed seed (the global RNG is given back
untouched, so the run's own init draw is the one it would have without the measurement), one warm-up step per dtype
and :data:`MEASURE_STEPS` timed steps each, the dtypes taking turns (fp32, bf16, then bf16, fp32, …) so that a change
of machine load hits both alike; the median per dtype. It runs eager (a compiled run's ratio may differ) and costs
2 · (1 + MEASURE_STEPS) forward + backward steps, once per machine and shape: the result is cached in
``dtype.json`` of the cache folder (``$SMALLINIT_CACHE``, else ``$XDG_CACHE_HOME/smallinit``, default
``~/.cache/smallinit``), keyed by the machine (CPU model, its flags, torch version, torch threads; for CUDA the
device name, capability and CUDA version) and the shape (d_model, layers, heads, d_ff, vocabulary, norm, tied
embeddings, MoE layout, micro-batch, seq_len). The init scale γ, ε, the attention gate and the
learning rate are not part of the shape: the arms of one comparison share one decision and so train in the same
dtype (a loss gap across dtypes would not be the init's). The cache is read and written under a file lock (a second
run of the same shape waits for the first's measurement and reads it) and written atomically.

The choice and its reason are one line (:meth:`Decision.line`), printed when the run starts and kept in the run's
``origin.json`` (``"dtype"``) and ``summary.json`` (``"dtype"``, ``"dtype_reason"``); ``config.yaml`` and every
checkpoint's config hold the concrete dtype, so a resumed run never decides again (a run directory whose
``config.yaml`` says "auto" — a cooldown branch laid out from a trunk's checkpoint — takes the dtype of its newest
checkpoint). ``"fp32"`` and ``"bf16"`` force either.

What stays float32 under bf16 autocast (the parameters are float32 in every case, so autocast only lowers the
matmul inputs): the parameters themselves, their gradients and AdamW's m and v (the optimizer never sees a bf16
tensor: updates of size lr·g are far below bf16's 8-bit mantissa on weights of O(1)); the residual stream (the
embedding is float32 and each block adds its bf16 branch output to it, which promotes to float32); RMSNorm/LayerNorm
(``model/norm.py``: autocast off, computed on float32 — mean(h²) + ε with ε = 1e-12 is the quantity the small-init
claims are about, DESIGN §2); the attention softmax statistics (SDPA's CPU flash kernel and the CUDA kernels keep the
running max and sum in float32 for bf16 inputs; the probes' explicit attention weights upcast q and k); RoPE's tables
(float32, cast to the activations' dtype at use); the LM head's logits, the log-sum-exp and the loss
(``model/loss.py``: logits are float32 whatever the autocast dtype), the MoE router's softmax and z-loss
(``model/moe.py``); the validation loss's sum (float64); gradient clipping's norm.

``SMALLINIT_CPU_FLAGS`` (space-separated) replaces the /proc/cpuinfo flags: the tests set an AVX2-only set so that no
test depends on this machine's bf16, and it shows what ``auto`` would do elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from smallinit.train.dtype_cache import (  # noqa: F401 - the cache's names, re-exported
    CACHE_FILE,
    LOADED,
    cache_dir,
    cache_path,
    load_per_core,
    locked,
    read_cache,
    write_cache_entry,
)

DTYPES = ("auto", "fp32", "bf16")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_SPEEDUP = 1.05
"""bf16 is chosen only when its step is at least this much faster than float32's (t_fp32 / t_bf16)."""
MEASURE_STEPS = 5
CLAIM_RUNS_DTYPE = "fp32"
"""What ``auto`` means for the runs that decide a claim (crossovers, ``reproduce``): float32. The parity check of issue
31 (:func:`smallinit.train.precision_parity.loss_parity`: bf16 − fp32 final loss per arm and the claim-1 gap G under
both; 3 seeds, 4M tokens, d 128, measured 2026-12-02) found ΔG = +0.003 [−0.046, +0.053] against G's seed noise of
±0.032: *not resolved*, so bf16 is not shown to leave G within seed noise — small init is exactly where reduced
precision could bite (the paper arm's bf16 seeds scattered ≈ 3× more), and every arm of one comparison must train in
the same dtype whatever a per-machine cache says. An explicit ``train.dtype=bf16`` is honoured."""


def pin_for_claims(cfg: Any) -> Any:
    """``cfg`` with ``train.dtype`` "auto" replaced by :data:`CLAIM_RUNS_DTYPE` (in place; returned)."""
    if cfg.train.dtype == "auto":
        cfg.train.dtype = CLAIM_RUNS_DTYPE
    return cfg


@dataclass(frozen=True)
class Decision:
    """A run's dtype and why. ``setting``: the config's value ("auto", "fp32", "bf16") or "resumed"."""

    dtype: str
    setting: str
    reason: str
    fp32_s: float | None = None
    bf16_s: float | None = None
    cached: bool = False

    def line(self) -> str:
        """The one line a user sees: ``dtype: bf16 (auto: …)``."""
        return f"dtype: {self.dtype} ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


# ---- the machine ------------------------------------------------------------------------------------------


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The ``flags`` of the first processor in /proc/cpuinfo text (empty when there is none)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """This CPU's flags (``SMALLINIT_CPU_FLAGS`` replaces them when set; empty when unknown, e.g. not Linux)."""
    env = os.environ.get("SMALLINIT_CPU_FLAGS")
    if env is not None:
        return frozenset(env.split())
    try:
        return parse_cpu_flags(Path(path).read_text(errors="replace"))
    except OSError:
        return frozenset()


def cpu_model(path: str = "/proc/cpuinfo") -> str:
    try:
        for line in Path(path).read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def native_bf16(device_type: str, flags: Iterable[str] = (), cuda_bf16: bool = False) -> tuple[bool, str]:
    """Whether ``device_type`` computes bf16 natively, and the words that say why (pure: the caller gives the
    CPU ``flags`` and, for CUDA, ``cuda_bf16`` = torch.cuda.is_bf16_supported())."""
    if device_type == "cuda":
        return (True, "CUDA device with bf16") if cuda_bf16 else (False, "this CUDA device has no native bf16")
    if device_type == "cpu":
        have = [f for f in NATIVE_BF16_FLAGS if f in set(flags)]
        if have:
            return True, f"CPU has {' '.join(have)}"
        return False, f"this CPU has no native bf16: neither {' nor '.join(NATIVE_BF16_FLAGS)} among its flags"
    return False, f"no bf16 rule for device {device_type!r}"


def bf16_where_native(device: str = "auto") -> tuple[str, str]:
    """("bf16", why) when the device a run would use computes bf16 natively, else ("fp32", why): a preset that trains
    in bf16 only where it is fast (emulated bf16 on an AVX2-only CPU is many times slower than float32)."""
    import torch

    from smallinit.core.device import resolve_device

    dev = torch.device(resolve_device(device))
    cuda = bool(dev.type == "cuda" and torch.cuda.is_bf16_supported())
    ok, why = native_bf16(dev.type, cpu_flags() if dev.type == "cpu" else (), cuda)
    return ("bf16" if ok else "fp32"), why


def machine_key(device, flags: Iterable[str] = (), threads: int | None = None) -> dict[str, Any]:
    """What a measurement depends on besides the shape: the processor, its flags, torch, its threads."""
    import torch

    key: dict[str, Any] = {"torch": torch.__version__, "threads": threads or torch.get_num_threads()}
    if getattr(device, "type", device) == "cuda":
        idx = device.index if getattr(device, "index", None) is not None else torch.cuda.current_device()
        key.update(
            device="cuda",
            name=torch.cuda.get_device_name(idx),
            capability=list(torch.cuda.get_device_capability(idx)),
            cuda=torch.version.cuda,
        )
    else:
        key.update(
            device=str(getattr(device, "type", device)),
            cpu=cpu_model(),
            flags=hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:16],
        )
    return key


def shape_key(model_cfg, micro_batch: int, seq_len: int) -> dict[str, Any]:
    """The model's compute shape (not its init scale, ε or gate: arms of one comparison share a decision)."""
    m = model_cfg
    moe = m.moe
    return {
        "vocab": m.vocab_size,
        "d_model": m.d_model,
        "n_layers": m.n_layers,
        "n_heads": m.n_heads,
        "n_kv_heads": m.n_kv_heads,
        "d_ff": m.d_ff,
        "norm": m.norm,
        "tied": m.tie_embeddings,
        "moe": [moe.n_experts, moe.top_k, moe.n_shared_experts, moe.d_expert, moe.every] if moe.enabled else None,
        "batch": int(micro_batch),
        "seq_len": int(seq_len),
    }


def cache_key(machine: dict[str, Any], shape: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([machine, shape], sort_keys=True).encode()).hexdigest()[:24]


# ---- the decision -----------------------------------------------------------------------------------------


def choose(fp32_s: float, bf16_s: float, min_speedup: float = MIN_SPEEDUP) -> str:
    """ "bf16" when its step is at least ``min_speedup`` × faster than float32's, else "fp32"."""
    return "bf16" if bf16_s > 0 and fp32_s / bf16_s >= min_speedup else "fp32"


def _fmt_s(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 10 else f"{s:.1f} s"


def decide(
    setting: str,
    device_type: str,
    *,
    flags: Iterable[str] = (),
    cuda_bf16: bool = False,
    measure: Callable[[], tuple[float, float]] | None = None,
    key: str | None = None,
    cache_file: Path | None = None,
    shape_text: str = "",
    info: dict[str, Any] | None = None,
    now: Callable[[], float] = time.time,
    load: Callable[[], float] = load_per_core,
) -> Decision:
    """The dtype for ``setting`` on ``device_type`` (pure apart from the cache file; the tests fake every input).

    ``measure()`` → (fp32 seconds, bf16 seconds) of one step; it is called only when the device has native bf16 and
    the cache (``cache_file``, entry ``key``) holds no usable measurement: none, or one taken under load (``load()``,
    the 1-minute load per core, above :data:`LOADED` then) while the machine is quiet now. The load is recorded
    with every measurement and named in the reason. ``info``: readable machine/shape fields stored beside a new
    cache entry."""
    if setting in ("fp32", "bf16"):
        return Decision(setting, setting, "set by train.dtype")
    if setting != "auto":
        raise ValueError(f"train.dtype must be one of {', '.join(DTYPES)}, got {setting!r}")
    ok, why = native_bf16(device_type, flags, cuda_bf16)
    if not ok:
        return Decision("fp32", "auto", f"auto: {why}")
    with locked(cache_file if key else None):
        entry = read_cache(cache_file).get(key) if cache_file is not None and key else None
        cached = isinstance(entry, dict) and all(
            isinstance(entry.get(k), (int, float)) and entry[k] > 0 for k in ("fp32_s", "bf16_s")
        )
        now_load = load()
        was_loaded = cached and float(entry.get("load_per_core", 0.0)) > LOADED
        if was_loaded and now_load <= LOADED:
            cached = False  # taken on a busy machine, and this one is quiet: measure again
        if cached:
            fp32_s, bf16_s = float(entry["fp32_s"]), float(entry["bf16_s"])
            at_load = float(entry.get("load_per_core", float("nan")))
        else:
            if measure is None:
                raise ValueError("decide: no cached measurement and nothing to measure with")
            fp32_s, bf16_s = measure()
            at_load = max(now_load, load())
            if cache_file is not None and key:
                write_cache_entry(
                    cache_file,
                    key,
                    {
                        "fp32_s": fp32_s,
                        "bf16_s": bf16_s,
                        "measured_at": time.strftime("%Y-%m-%d %H:%M", time.gmtime(now())),
                        "load_per_core": round(at_load, 3),
                        **(info or {}),
                    },
                )
    dtype = choose(fp32_s, bf16_s)
    ratio = fp32_s / bf16_s if bf16_s > 0 else float("nan")
    busy = "" if at_load != at_load else f" at load {at_load:.2f}/core" + (" (busy)" if at_load > LOADED else "")
    when = (f"cached, measured {entry.get('measured_at', '?')} UTC" if cached else "measured now") + busy
    where = f" at {shape_text}" if shape_text else ""
    verdict = (
        f"bf16 ×{ratio:.2f} faster" if dtype == "bf16" else f"bf16 ×{ratio:.2f}, below the ×{MIN_SPEEDUP:g} needed"
    )
    reason = (
        f"auto: {why}; a forward+backward step{where} took {_fmt_s(bf16_s)} in bf16 autocast vs "
        f"{_fmt_s(fp32_s)} in fp32, {verdict} ({when})"
    )
    return Decision(dtype, "auto", reason, fp32_s, bf16_s, cached)


# ---- the measurement --------------------------------------------------------------------------------------


def measure_step_seconds(
    model_cfg, batch: int, seq_len: int, device, steps: int = MEASURE_STEPS
) -> tuple[float, float]:
    """Median seconds of a forward + backward step of ``model_cfg``'s model on random tokens (batch × seq_len) in
    float32 and under bf16 autocast, the dtypes taking turns; the global RNG is restored afterwards."""
    import copy

    import torch

    from smallinit.model import Transformer

    device = torch.device(device)
    cuda = device.type == "cuda"
    fork = torch.random.fork_rng(devices=[device.index or 0] if cuda else [])
    with fork:
        torch.manual_seed(0)
        model = Transformer(copy.deepcopy(model_cfg)).to(device)
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, model_cfg.vocab_size, (batch, seq_len), generator=g).to(device)
        y = torch.randint(0, model_cfg.vocab_size, (batch, seq_len), generator=g).to(device)

        def step(dtype: str) -> float:
            t0 = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
                loss = model(x, targets=y)
            loss.backward()
            model.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize(device)
            return time.perf_counter() - t0

        step("fp32"), step("bf16")  # warm-up (allocations, kernel selection)
        times: dict[str, list[float]] = {"fp32": [], "bf16": []}
        for r in range(max(1, steps)):
            for d in ("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32"):
                times[d].append(step(d))
    return statistics.median(times["fp32"]), statistics.median(times["bf16"])


def resolve(
    setting: str,
    model_cfg,
    micro_batch: int,
    seq_len: int,
    device,
    *,
    measure: Callable[[], tuple[float, float]] | None = None,
) -> Decision:
    """:func:`decide` for a run on this machine: its flags, the cache folder, :func:`measure_step_seconds`."""
    import torch

    device = torch.device(device)
    if setting != "auto":
        return decide(setting, device.type)
    flags = cpu_flags() if device.type == "cpu" else frozenset()
    cuda_bf16 = bool(device.type == "cuda" and torch.cuda.is_bf16_supported())
    ok, _ = native_bf16(device.type, flags, cuda_bf16)
    if not ok:  # no key, no cache: nothing is measured
        return decide(setting, device.type, flags=flags, cuda_bf16=cuda_bf16)
    machine, shape = machine_key(device, flags), shape_key(model_cfg, micro_batch, seq_len)
    if measure is None:

        def measure():
            return measure_step_seconds(model_cfg, micro_batch, seq_len, device)

    return decide(
        setting,
        device.type,
        flags=flags,
        cuda_bf16=cuda_bf16,
        measure=measure,
        key=cache_key(machine, shape),
        cache_file=cache_path(),
        info={"machine": machine, "shape": shape},
        shape_text=f"B {micro_batch} × T {seq_len}",
    )


# ---- a run's own dtype ------------------------------------------------------------------------------------


def kept_dtype(run_dir: str | os.PathLike) -> Decision | None:
    """The dtype a run directory already trained in: its newest checkpoint's config (a concrete value), with the
    reason recorded in origin.json when there is one; None when no checkpoint holds one."""
    import yaml

    from smallinit.runs.checkpoint import list_checkpoints
    from smallinit.runs.rundir import ORIGIN, read_json

    for ckpt in reversed(list_checkpoints(run_dir)):
        try:
            d = (yaml.safe_load((ckpt / "config.yaml").read_text()) or {}).get("train", {}).get("dtype")
        except (OSError, yaml.YAMLError, AttributeError, UnicodeDecodeError):
            continue
        if d in ("fp32", "bf16"):
            return resumed(d, read_json(Path(run_dir) / ORIGIN), f"checkpoint {ckpt.name}")
    return None


def resumed(dtype: str, origin: dict[str, Any] | None, source: str = "config.yaml") -> Decision:
    """The decision of a resumed run: ``dtype`` as the run has it, with the start's reason when origin.json has it."""
    first = (origin or {}).get("dtype") if isinstance(origin, dict) else None
    why = first.get("reason") if isinstance(first, dict) and first.get("dtype") == dtype else None
    return Decision(dtype, "resumed", f"kept from the run's {source}" + (f"; at its start: {why}" if why else ""))


def for_run(
    cfg,
    device,
    micro_batch: int,
    run_dir: str | os.PathLike,
    resume: bool,
    measure: Callable[[], tuple[float, float]] | None = None,
) -> Decision:
    """The decision of a Trainer's run. A resumed run keeps its dtype: ``config.yaml``'s concrete value, or — where it
    says "auto" (a branch laid out from a trunk's checkpoint) — its newest checkpoint's; only a run that has trained
    nothing yet decides. Under torch.distributed rank 0 decides and every rank takes its answer."""
    import torch.distributed as dist

    from smallinit.runs.rundir import ORIGIN, read_json

    setting = cfg.train.dtype
    decision = None
    if resume:
        if setting in ("fp32", "bf16"):
            decision = resumed(setting, read_json(Path(run_dir) / ORIGIN))
        else:
            decision = kept_dtype(run_dir)
    if decision is not None:
        return decision
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if distributed and setting == "auto":
        box: list[Any] = [None]
        if dist.get_rank() == 0:
            box[0] = resolve(setting, cfg.model, micro_batch, cfg.data.seq_len, device, measure=measure).to_dict()
        dist.broadcast_object_list(box, src=0)
        return Decision(**box[0])
    return resolve(setting, cfg.model, micro_batch, cfg.data.seq_len, device, measure=measure)


__all__ = [
    "CACHE_FILE",
    "DTYPES",
    "Decision",
    "MIN_SPEEDUP",
    "NATIVE_BF16_FLAGS",
    "cache_dir",
    "cache_key",
    "cache_path",
    "choose",
    "cpu_flags",
    "decide",
    "for_run",
    "kept_dtype",
    "machine_key",
    "measure_step_seconds",
    "native_bf16",
    "parse_cpu_flags",
    "read_cache",
    "resolve",
    "resumed",
    "shape_key",
    "write_cache_entry",
]
