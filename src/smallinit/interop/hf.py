"""Hugging Face interoperability: export a run to a ``transformers`` folder, import a Llama checkpoint.

Export (``export_hf``). A dense RMSNorm model **without** the attention gate is exactly a Llama
(pre-norm, RoPE in the ``rotate_half`` layout, SwiGLU, RMSNorm in float32, optional GQA and tied
embeddings), so it becomes a ``LlamaForCausalLM`` folder that ``transformers`` loads offline:

    config.json              LlamaConfig: rms_norm_eps = our norm_eps exactly (1e-12 stays 1e-12),
                             rope_theta, num_key_value_heads, tie_word_embeddings, bos/eos ids, ...
    model.safetensors        HF tensor names; our fused matrices split (below)
    generation_config.json   bos/eos ids
    tokenizer.json           the run's tokenizer, unchanged
    tokenizer_config.json    PreTrainedTokenizerFast, bos/eos = <|endoftext|> (no BOS added on encode)
    special_tokens_map.json
    README.md                provenance (run, step, γ, ε) and the tensor layout

Tensor names (ours -> Llama), block i — the one table is ``smallinit.model.hf_names.HF_NAMES`` (export reads it
forwards, import inverted):

    tok_emb.weight                     model.embed_tokens.weight
    blocks.i.attn_norm.weight          model.layers.i.input_layernorm.weight
    blocks.i.attn.w_qkvg.weight        rows [q (H·hd) | k (Hkv·hd) | v (Hkv·hd)] -> self_attn.{q,k,v}_proj.weight
    blocks.i.attn.w_o.weight           model.layers.i.self_attn.o_proj.weight
    blocks.i.mlp_norm.weight           model.layers.i.post_attention_layernorm.weight
    blocks.i.mlp.w_gate_up.weight      rows [gate (d_ff) | up (d_ff)] -> mlp.{gate,up}_proj.weight
    blocks.i.mlp.w_down.weight         model.layers.i.mlp.down_proj.weight
    norm_f.weight                      model.norm.weight
    lm_head.weight                     lm_head.weight (absent when tied)

Q and K need no permutation: our RoPE already pairs channel j with j + hd/2 (HF's ``rotate_half``).

Gated and MoE models (``gate`` = headwise / elementwise, or ``moe.n_experts`` > 0) are exported as
``SmallinitForCausalLM`` **with their code in the folder**: ``configuration_smallinit.py`` and
``modeling_smallinit.py`` (copied from :mod:`smallinit.interop.hf_remote`; they import only torch and transformers) and
``"auto_map"`` in config.json, so ``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)``,
``generate``, pipelines and lm-eval's ``hf`` model (``trust_remote_code=True``) load them. Tensor names are Llama's,
except that ``q_proj`` carries the gate the Qwen3-Next way, interleaved per head::

    q_proj.weight  shape (H·(hd + g), d):  for h in 0..H-1:  [ q rows of head h (hd) ; gate rows of head h (g) ]
    g = hd (elementwise: one gate per channel)  or  1 (headwise: one scalar per head)
    attention output of head h (hd channels) *= sigmoid(x · gate_rows_hᵀ), then o_proj

and that an MoE block's feed-forward is ``mlp.gate`` (router, (E, d)), ``mlp.experts.gate_up_proj`` (E, 2·d_e, d),
``mlp.experts.down_proj`` (E, d, d_e), ``mlp.shared_expert.{gate,up,down}_proj`` and ``mlp.expert_bias`` (the
table: :data:`smallinit.model.hf_names.HF_MOE_NAMES`). ``config.json`` also carries ``gate``, ``attn_output_gate``,
``gate_layout``, the MoE fields (``num_experts``, ``num_experts_per_tok``, ``norm_topk_prob``,
``moe_intermediate_size``, ``n_shared_experts``, ``moe_every``, ``router_expert_bias``) and ``"smallinit"`` (our
full ModelConfig, which import reads).

No ``transformers`` class computes these models exactly, so none is used (checked against transformers 5.24): the
classes with a query-dependent sigmoid gate on the attention output (Qwen3-Next, Qwen3.5, Qwen4-Exp, AFMoE,
MiniMax-M3, Beam, Dory) all RMS- or L2-normalize q and k per head (``q_norm``/``k_norm``), which our model does not
and no weights undo; HrmText has unweighted norms and recurrent H/L cycles, Inkling2 scaled/normalized queries, AXK2
and HY-V4 latent (MLA-style) attention; and none has a headwise (one scalar per head) gate. LayerNorm models are
refused.

Import (``import_hf``). A local Llama folder (config.json, model.safetensors or sharded
``model-*.safetensors`` + index, tokenizer.json) or a SmallinitForCausalLM export becomes a run
directory: ``config.yaml`` (a full RunConfig), ``tokenizer.json``, ``hf_config.json`` (the source's
config.json, for provenance and the bos/eos ids of a later export) and ``checkpoints/step_00000000`` with
empty optimizer state. Only what our model computes exactly is accepted: ``hidden_act = silu``, no
attention/MLP biases, default RoPE (no ``rope_scaling``), ``head_dim = hidden_size / num_heads``.
Weights are stored as float32 (as our checkpoints are). ``model.gamma`` of an imported run is the config
default and means nothing for weights that were not drawn by us.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from smallinit.core.errors import CheckpointError, ConfigError
from smallinit.core.io import umask
from smallinit.interop.hf_config import (
    GATED_ARCH,
    LLAMA_ARCH,  # noqa: F401 (re-exported)
    check_exportable,
    hf_config_dict,
    model_config_from_hf,
)
from smallinit.model.config import ModelConfig
from smallinit.model.hf_names import gate_rows, inverse_table, name_table, parts, transposed

EOT_TOKEN = "<|endoftext|>"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"


# config.json <-> ModelConfig (check_exportable, hf_config_dict, model_config_from_hf): smallinit.interop.hf_config


# ----------------------------------------------------------------------------- tensor mapping


def _gate_rows(cfg: ModelConfig) -> int:
    return gate_rows(cfg)


def fold_gate(q: torch.Tensor, gate: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Qwen3-Next q_proj from our q (H·hd, d) and gate (H·g, d): per head [q_h ; gate_h], shape (H·(hd+g), d)."""
    d = q.shape[1]
    return torch.cat([q.reshape(n_heads, -1, d), gate.reshape(n_heads, -1, d)], dim=1).reshape(-1, d)


def unfold_gate(q_proj: torch.Tensor, n_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`fold_gate`: (q (H·hd, d), gate (H·g, d))."""
    d = q_proj.shape[1]
    per_head = q_proj.reshape(n_heads, -1, d)
    return per_head[:, :head_dim].reshape(-1, d), per_head[:, head_dim:].reshape(-1, d)


def _to_hf_rows(name: str, w: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """Our fused attention matrix [q | k | v | gate] reordered to HF's [q_proj (gate folded) | k | v]; the stacked
    expert matrices transposed to (E, out, in)."""
    if transposed(name):
        return w.transpose(-1, -2)
    if not name.endswith("attn.w_qkvg.weight") or not _gate_rows(cfg):
        return w
    H, hd, kv = cfg.n_heads, cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    q, k, v, gate = w.split([H * hd, kv, kv, H * _gate_rows(cfg)], dim=0)
    return torch.cat([fold_gate(q, gate, H), k, v], dim=0)


def _from_hf_rows(name: str, w: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """Inverse of :func:`_to_hf_rows`."""
    if transposed(name):
        return w.transpose(-1, -2)
    if not name.endswith("attn.w_qkvg.weight") or not _gate_rows(cfg):
        return w
    H, hd, kv = cfg.n_heads, cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    q_proj, k, v = w.split([H * (hd + _gate_rows(cfg)), kv, kv], dim=0)
    q, gate = unfold_gate(q_proj, H, hd)
    return torch.cat([q, k, v, gate], dim=0)


def to_hf_state_dict(tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our tensors (``lm_head.weight`` optional when tied) -> HF names by the one table
    (:data:`smallinit.model.hf_names.HF_NAMES`), fused matrices split, the gate folded into q_proj."""
    check_exportable(cfg)
    out = {}
    for ours, theirs in name_table(cfg).items():
        w = _to_hf_rows(ours, tensors[ours], cfg)
        rows = parts(ours, cfg)
        for t, piece in zip(theirs, w.split(rows, dim=0) if rows else [w]):
            out[t] = piece
    return {k: v.contiguous() for k, v in out.items()}


def hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Expected HF tensor names and shapes for ``cfg`` (``lm_head.weight`` only when untied), from the table
    and the shapes of our model's parameters."""
    from smallinit.model import Transformer

    with torch.device("meta"):
        ours = {k: tuple(v.shape) for k, v in Transformer(cfg).state_dict().items()}
    shapes: dict[str, tuple[int, ...]] = {}
    for name, theirs in name_table(cfg).items():
        rows = parts(name, cfg)
        if transposed(name):
            shapes[theirs[0]] = (*ours[name][:-2], ours[name][-1], ours[name][-2])
        elif rows is None:
            shapes[theirs[0]] = ours[name]
        else:
            for t, r in zip(theirs, rows):
                shapes[t] = (r, *ours[name][1:])
    return shapes


def from_hf_state_dict(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> our names by the inverted table (fused matrices concatenated; the gate unfolded).
    CheckpointError on a missing, unexpected or misshapen tensor. A tied model's ``lm_head.weight``, if
    present, must equal the embedding and is dropped."""
    shapes = hf_shapes(cfg)
    hf = {k: v for k, v in hf.items() if not k.endswith("rotary_emb.inv_freq")}  # old checkpoints' RoPE buffers
    if cfg.tie_embeddings and "lm_head.weight" in hf:
        if not torch.equal(hf["lm_head.weight"], hf.get("model.embed_tokens.weight", torch.empty(0))):
            raise CheckpointError("tie_word_embeddings is true but lm_head.weight differs from the embedding")
        hf = {k: v for k, v in hf.items() if k != "lm_head.weight"}
    missing, extra = sorted(set(shapes) - set(hf)), sorted(set(hf) - set(shapes))
    if missing or extra:
        raise CheckpointError(f"weights do not match config.json (missing {missing[:4]}, unexpected {extra[:4]})")
    for k, s in shapes.items():
        if tuple(hf[k].shape) != s:
            raise CheckpointError(f"weight {k} has shape {tuple(hf[k].shape)}, config.json implies {s}")
    pieces: dict[str, dict[int, torch.Tensor]] = {}
    for t, (ours, j) in inverse_table(cfg).items():
        pieces.setdefault(ours, {})[j] = hf[t]
    out = {
        ours: _from_hf_rows(ours, torch.cat([p[j] for j in sorted(p)], dim=0) if len(p) > 1 else p[0], cfg)
        for ours, p in pieces.items()
    }
    return {k: v.contiguous() for k, v in out.items()}


# ----------------------------------------------------------------------------- files


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def _special_ids(tokenizer: Any, run_dir: Path | None) -> tuple[int | None, int | None]:
    """bos/eos ids: those of the source model when the run was imported (``hf_config.json``), else
    ``<|endoftext|>`` (our BOS and document separator), else None."""
    if run_dir is not None and (run_dir / "hf_config.json").is_file():
        try:
            src = json.loads((run_dir / "hf_config.json").read_text())
        except ValueError:
            src = {}
        ids = [src.get("bos_token_id"), src.get("eos_token_id")]
        if any(isinstance(i, int) for i in ids):
            return tuple(i if isinstance(i, int) else None for i in ids)  # type: ignore[return-value]
    eot = tokenizer.token_to_id(EOT_TOKEN)
    return eot, eot


def _readme(cfg: ModelConfig, layout: str, source: str, step: int, dtype: str) -> str:
    m = cfg.moe
    moe = (
        f" MoE: {m.n_experts} experts of width {m.d_expert or cfg.d_ff}, top-{m.top_k}, "
        f"{m.n_shared_experts} shared, every {m.every} block(s)."
        if m.enabled
        else ""
    )
    lines = [
        f"# smallinit export ({GATED_ARCH if layout == 'remote' else LLAMA_ARCH})",
        "",
        f"Exported by `smallinit export` from `{source}` (step {step}), weights in {dtype}.",
        f"Model: d_model={cfg.d_model}, n_layers={cfg.n_layers}, n_heads={cfg.n_heads}, n_kv_heads={cfg.n_kv_heads}, "
        f"d_ff={cfg.d_ff}, vocab={cfg.vocab_size}, tied={cfg.tie_embeddings}, RMSNorm eps={cfg.norm_eps!r}, "
        f"rope_theta={cfg.rope_theta!r}, init gamma={cfg.gamma!r}, gate={cfg.gate}.{moe}",
        "",
    ]
    tok_note = (
        "The tokenizer does not add a BOS token; prepend `<|endoftext|>` yourself if the run trained with "
        "`data.bos=true`."
    )
    if layout == "llama":
        lines += [
            "A standard `LlamaForCausalLM` folder: load it with",
            "`transformers.AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)`.",
            tok_note,
            "",
        ]
        return "\n".join(lines)
    g = {"elementwise": "head_dim", "headwise": "1", "none": "0"}[cfg.gate]
    lines += [
        "Load it with `transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)` (and "
        "`AutoTokenizer.from_pretrained(path)`); lm-eval: `--model hf --model_args "
        "pretrained=PATH,trust_remote_code=True`. The model code is in this folder (`modeling_smallinit.py`, "
        "`configuration_smallinit.py`; they import only torch and transformers): no `transformers` class computes "
        "this model exactly — the classes with a query-dependent attention output gate (Qwen3-Next and its kin) "
        "also normalize q and k per head (`q_norm`, `k_norm`), which this model does not do and no weights can undo. "
        "`smallinit import-hf` reads the folder back.",
        tok_note,
        "",
        "Layout: every tensor is named and computed as in Llama (`model.embed_tokens`, `model.layers.i."
        "input_layernorm`, `self_attn.{q,k,v,o}_proj`, `post_attention_layernorm`, `mlp.{gate,up,down}_proj`, "
        "`model.norm`, `lm_head` unless tied), except:",
        "",
        f"- `q_proj.weight` has shape `(H*(head_dim+g), hidden)` with g = {g} (`gate: {cfg.gate}`): for each head "
        "h in order, `head_dim` query rows of head h, then the g gate rows of head h (Qwen3-Next's interleaving).",
        "- Per token x (the normalized input of the attention block): q_h, gate_h = split(x @ q_proj_hᵀ); "
        "RoPE (rotate_half) on q and k; causal softmax attention y_h with scale head_dim^-0.5 and GQA; "
        "y_h *= sigmoid(gate_h) (a scalar per head when g = 1; no gate when g = 0); output = o_proj(concat_h y_h).",
        "- RMSNorm: y = w * h / sqrt(mean(h^2) + rms_norm_eps), in float32.",
    ]
    if m.enabled:
        lines += [
            "- MoE blocks (`num_experts` > 0; blocks every-1, 2·every-1, ... with `moe_every` = every): router "
            "`mlp.gate.weight` (E, hidden); p = softmax(x @ gateᵀ) in float32; the top-k experts by p (by "
            "p + `mlp.expert_bias` when `router_expert_bias`); weights p / Σ_top-k p (`norm_topk_prob`, k ≥ 2) or p "
            "(k = 1); y = Σ w_e · down_e(silu(gate_e(x)) * up_e(x)) + shared_expert(x), with "
            "`mlp.experts.gate_up_proj[e]` = [gate rows ; up rows] (2·d_e, hidden) and `mlp.experts.down_proj[e]` "
            "(hidden, d_e); `mlp.shared_expert.{gate,up,down}_proj` is one SwiGLU of width n_shared·d_e."
        ]
    lines += [
        "",
        "`config.json` carries `auto_map`, `gate`, `attn_output_gate`, `gate_layout: qwen3_next_interleaved`, "
        "the MoE fields and `smallinit` (the full model config).",
        "",
    ]
    return "\n".join(lines)


def export_hf(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    step: int | None = None,
    dtype: str = "float32",
    force: bool = False,
) -> Path:
    """Write the checkpoint of ``run_dir`` (latest good, or ``step``) as a Hugging Face folder ``out_dir``
    (layout in the module docstring). Built in a temporary folder and renamed into place. Returns ``out_dir``."""
    from safetensors.torch import save_file

    from smallinit.core.outputs import check_out_dir, staged_dir
    from smallinit.runs.checkpoint import load_run_tokenizer, read_checkpoint, resolve_checkpoint

    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    # the output-folder policy first: never the run itself, a folder holding it, or one inside it
    plan = check_out_dir(out_dir, "export", inputs=[run_dir], force=force, verb="export")
    ckpt = resolve_checkpoint(run_dir, step)
    data = read_checkpoint(ckpt)
    try:
        cfg = ModelConfig.from_dict(data["config"].get("model", data["config"]))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{ckpt}: checkpoint config is invalid: {e}") from None
    layout = check_exportable(cfg)
    tokenizer = load_run_tokenizer(ckpt)
    run_root = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else None
    tok_path = next(
        p for p in (Path(ckpt) / "tokenizer.json", Path(ckpt).parent.parent / "tokenizer.json") if p.is_file()
    )
    try:
        hf = {k: v.to(DTYPES[dtype]).contiguous() for k, v in to_hf_state_dict(data["model"], cfg).items()}
    except KeyError as e:
        raise CheckpointError(f"{ckpt}: weight {e.args[0]} missing from the checkpoint") from None
    if tokenizer.get_vocab_size() > cfg.vocab_size:
        raise CheckpointError(
            f"{tok_path}: tokenizer has {tokenizer.get_vocab_size()} tokens, the model only {cfg.vocab_size}"
        )
    bos, eos = _special_ids(tokenizer, run_root)
    with staged_dir(plan) as tmp:
        save_file(hf, str(tmp / SAFE_WEIGHTS), metadata={"format": "pt"})
        os.chmod(tmp / SAFE_WEIGHTS, 0o666 & ~umask())  # safetensors writes 0600: readable like the other files
        _write_json(tmp / "config.json", hf_config_dict(cfg, bos, eos, dtype))
        _write_json(tmp / "generation_config.json", {"bos_token_id": bos, "eos_token_id": eos})
        shutil.copyfile(tok_path, tmp / "tokenizer.json")
        specials = {
            "bos_token": tokenizer.id_to_token(bos) if bos is not None else None,
            "eos_token": tokenizer.id_to_token(eos) if eos is not None else None,
        }
        _write_json(
            tmp / "tokenizer_config.json",
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                **specials,
                "add_bos_token": False,
                "add_eos_token": False,
                "clean_up_tokenization_spaces": False,
                "model_max_length": cfg.max_seq_len,
            },
        )
        _write_json(tmp / "special_tokens_map.json", {k: v for k, v in specials.items() if v is not None})
        if layout == "remote":
            from smallinit.interop.hf_remote import remote_code_sources

            for name, code in remote_code_sources().items():
                (tmp / name).write_bytes(code)
        (tmp / "README.md").write_text(
            _readme(cfg, layout, str(run_dir), int(data["state"].get("step", 0)), dtype), encoding="utf-8"
        )
    return plan.path


def load_hf_tensors(hf_dir: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor of a HF folder: ``model.safetensors``, or the shards listed by
    ``model.safetensors.index.json``, or else all ``*.safetensors`` files in it."""
    from safetensors.torch import load_file

    d = Path(hf_dir)
    if (d / SAFE_INDEX).is_file():
        try:
            weight_map = json.loads((d / SAFE_INDEX).read_text())["weight_map"]
        except (ValueError, KeyError, TypeError):
            raise CheckpointError(f"{d / SAFE_INDEX}: malformed index (no weight_map)") from None
        files = sorted(set(weight_map.values()))
    elif (d / SAFE_WEIGHTS).is_file():
        files = [SAFE_WEIGHTS]
    else:
        files = sorted(p.name for p in d.glob("*.safetensors"))
    if not files:
        bins = sorted(p.name for p in d.glob("*.bin"))
        hint = f" (found {', '.join(bins[:3])}: convert them to safetensors first)" if bins else ""
        raise CheckpointError(f"{d}: no safetensors weights{hint}")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        path = d / name
        if not path.is_file():
            raise CheckpointError(f"{path}: shard listed in {SAFE_INDEX} is missing")
        try:
            part = load_file(str(path))
        except Exception as e:  # safetensors raises its own error types on a bad header
            raise CheckpointError(f"{path}: unreadable safetensors file ({type(e).__name__}: {e})") from None
        dup = set(part) & set(tensors)
        if dup:
            raise CheckpointError(f"{path}: tensor {sorted(dup)[0]} appears in two shards")
        tensors.update(part)
    return tensors


def import_hf(
    hf_dir: str | os.PathLike, out_dir: str | os.PathLike, max_seq_len: int | None = None, force: bool = False
) -> Path:
    """Turn a local Llama (or SmallinitForCausalLM) folder into a run directory ``out_dir`` with a step-0
    checkpoint (module docstring). Built in a temporary folder and renamed into place. Returns ``out_dir``."""
    from tokenizers import Tokenizer

    from smallinit.config import RunConfig, config_from_dict, save_config
    from smallinit.core.io import atomic_write_text
    from smallinit.core.outputs import check_out_dir, staged_dir
    from smallinit.runs.checkpoint import save_checkpoint

    src = Path(hf_dir)
    plan = check_out_dir(out_dir, "run", inputs=[src], force=force, verb="import-hf")
    if not (src / "config.json").is_file():
        raise CheckpointError(f"{src}: not a Hugging Face model folder (no config.json)")
    try:
        hf_cfg = json.loads((src / "config.json").read_text())
    except ValueError as e:
        raise CheckpointError(f"{src / 'config.json'}: not valid JSON ({e})") from None
    if not isinstance(hf_cfg, dict):
        raise CheckpointError(f"{src / 'config.json'}: expected a JSON object")
    cfg = model_config_from_hf(hf_cfg, max_seq_len)
    if not (src / "tokenizer.json").is_file():
        raise CheckpointError(f"{src}: no tokenizer.json (import-hf needs a fast-tokenizer file beside the weights)")
    try:
        tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    except Exception as e:  # tokenizers raises a plain Exception on a bad file
        raise CheckpointError(f"{src / 'tokenizer.json'}: not a valid tokenizer.json ({str(e)[:200]})") from None
    if tok.get_vocab_size() > cfg.vocab_size:
        raise CheckpointError(
            f"{src / 'tokenizer.json'}: {tok.get_vocab_size()} tokens, but vocab_size is {cfg.vocab_size}"
        )
    tensors = {k: v.float() for k, v in from_hf_state_dict(load_hf_tensors(src), cfg).items()}
    run_cfg = RunConfig(model=cfg)
    run_cfg.data.seq_len = min(run_cfg.data.seq_len, cfg.max_seq_len)
    run_cfg = config_from_dict(run_cfg.to_dict())  # validated, and what a later load reads back
    with staged_dir(plan) as tmp:
        save_config(run_cfg, tmp / "config.yaml")
        shutil.copyfile(src / "tokenizer.json", tmp / "tokenizer.json")
        atomic_write_text(tmp / "hf_config.json", json.dumps(hf_cfg, indent=2) + "\n")
        save_checkpoint(tmp, 0, tensors, {}, {"tokens": 0, "imported_from": str(src.resolve())}, run_cfg.to_dict())
    return plan.path


__all__ = [
    "GATED_ARCH",
    "LLAMA_ARCH",
    "check_exportable",
    "export_hf",
    "fold_gate",
    "from_hf_state_dict",
    "hf_config_dict",
    "hf_shapes",
    "import_hf",
    "load_hf_tensors",
    "model_config_from_hf",
    "to_hf_state_dict",
    "unfold_gate",
]
