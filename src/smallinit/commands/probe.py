"""smallinit probe RUN_DIR [--ckpt STEP] [--out FILE] [--data DIR]: recompute every probe on a saved checkpoint."""

from __future__ import annotations

import argparse

HELP = "recompute the probes (stable rank, condensation, sinks, norm saturation, residual flow) on a checkpoint"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run directory (latest good checkpoint) or a checkpoint directory"
    )
    p.add_argument(
        "--ckpt", type=int, metavar="STEP", help="the checkpoint of this step (default: the latest good one)"
    )
    p.add_argument("--out", metavar="FILE", help="JSON file to write (default: RUN_DIR/probe_step_XXXXXXXX.json)")
    p.add_argument(
        "--data", metavar="DIR", help="prepared data directory for the probe batch (default: the run's data.path)"
    )
    p.add_argument("--batch-size", type=int, help="sequences in the probe batch (default: the run's probe.batch_size)")
    p.add_argument("--exact", action="store_true", help="exact (SVD) stable rank instead of power iteration")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")


def format_table(rec: dict) -> str:
    """A compact text view of one probe record: a row per layer, then stable rank / condensation per matrix
    type (columns = layers; MoE experts averaged)."""
    from smallinit.probes.training import matrix_kind

    def f(v, w=9, p=4):
        return f"{'–':>{w}}" if v is None else f"{v:>{w}.{p}g}"

    lines = [
        f"T={rec['T']}  batch={rec['batch']}  uniform sink baseline={f(rec.get('uniform_sink'), 0)}  "
        f"embedding max|h|={f(rec.get('emb_max_act'), 0)}",
        f"{'layer':>5} {'sink':>9} {'max|h|':>9} {'sat attn':>9} {'sat mlp':>9} {'ε/ms attn':>9} "
        f"{'ε/ms mlp':>9} {'flow attn':>9} {'flow mlp':>9}",
    ]
    for l in rec["layers"]:
        an, mn = l.get("attn_norm") or {}, l.get("mlp_norm") or {}
        lines.append(
            f"{l['layer']:>5} {f(l.get('sink'))} {f(l.get('max_act'))} {f(an.get('saturation'))} "
            f"{f(mn.get('saturation'))} {f(an.get('eps_over_ms'))} {f(mn.get('eps_over_ms'))} "
            f"{f(l.get('flow_attn'))} {f(l.get('flow_mlp'))}"
        )
    fn = rec.get("final_norm") or {}
    lines.append(
        f"final norm: saturation {f(fn.get('saturation'), 0)}, ε/ms {f(fn.get('eps_over_ms'), 0)}, ε = {fn.get('eps')}"
    )
    mats = rec.get("matrices") or {}
    if mats:
        L = len(rec["layers"])
        table: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for name, m in mats.items():
            parts = name.split(".")
            col = parts[1] if parts[0] == "blocks" and len(parts) > 1 else "-"
            table.setdefault(matrix_kind(name), {}).setdefault(col, []).append((m.get("srank"), m.get("cond")))
        cols = [str(i) for i in range(L)]
        lines.append("")
        lines.append("stable rank / condensation index per matrix type and layer")
        lines.append(f"{'matrix':>16} " + " ".join(f"{'L' + c:>13}" for c in cols))
        for kind, per in table.items():
            cells = []
            for c in cols if "-" not in per else ["-"]:
                vals = per.get(c)
                if not vals or any(v is None for pair in vals for v in pair):
                    cells.append(f"{'–':>13}")
                    continue
                s = sum(v[0] for v in vals) / len(vals)
                k = sum(v[1] for v in vals) / len(vals)
                cells.append(f"{s:>7.4g}/{k:<5.2g}")
            lines.append(f"{kind:>16} " + " ".join(cells))
    if rec.get("moe"):
        m = rec["moe"]
        lines.append(
            f"MoE: router entropy {m['router_entropy']:.4g} (max {m['router_entropy_max']:.4g}), "
            f"dead experts {m['dead_experts']}, busiest expert share {m['max_expert_fraction']:.3g}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from smallinit.core.errors import ConfigError, DataError
    from smallinit.core.io import atomic_write_json
    from smallinit.core.outputs import check_out_file
    from smallinit.data import TokenData
    from smallinit.probes.training import compute_probes, probe_batch
    from smallinit.runs.checkpoint import model_from_state, read_checkpoint, resolve_checkpoint
    from smallinit.runs.rundir import run_data_path

    if args.batch_size is not None and args.batch_size <= 0:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.out:  # checked before the work, not after it
        check_out_file(args.out, "probe", inputs=[args.run_dir])
    ckpt = resolve_checkpoint(args.run_dir, args.ckpt)
    data = read_checkpoint(ckpt)
    cfg = data["config"]
    step = int(data["state"]["step"])
    run_dir = ckpt.parent.parent
    dcfg = cfg.get("data", {})
    data_path = Path(args.data) if args.data else run_data_path(run_dir, cfg)
    if not (data_path / "meta.json").is_file():
        what = "--data" if args.data else "the run's data.path"
        raise DataError(
            f"{data_path}: not a prepared data directory (no meta.json; {what})"
            + ("" if args.data else "; give --data DIR")
        )
    tokens = TokenData(data_path)
    vocab = cfg["model"]["vocab_size"]
    if tokens.vocab_size != vocab:
        raise DataError(
            f"{data_path}: vocabulary of {tokens.vocab_size} tokens, the model has {vocab}; "
            "give the --data the run was trained on"
        )
    batch_size = args.batch_size or cfg.get("probe", {}).get("batch_size", 4)
    if batch_size <= 0:
        raise ConfigError(f"--batch-size must be > 0, got {batch_size}")
    from smallinit.core.device import resolve_device

    device = str(resolve_device(args.device, what="--device"))
    model = model_from_state(cfg, data["model"], device)
    bos = tokens.bos_id if dcfg.get("bos") else None
    seq_len = int(dcfg.get("seq_len", cfg["model"]["max_seq_len"]))
    tokens.check_seq_len(seq_len, bos=bos is not None)
    idx = probe_batch(tokens.val, seq_len, batch_size, bos)
    autocast = (
        torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
        if cfg.get("train", {}).get("dtype") == "bf16"
        else None
    )
    rec = {
        "step": step,
        "checkpoint": str(ckpt),
        **compute_probes(model, idx, exact_srank=args.exact, autocast=autocast),
    }
    out = Path(args.out) if args.out else run_dir / f"probe_step_{step:08d}.json"
    atomic_write_json(out, rec)
    print(f"{ckpt} (step {step})")
    print(format_table(rec))
    print(f"wrote {out}")
    return 0
