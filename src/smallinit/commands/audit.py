"""smallinit audit TARGET [section.key=value ...] [--gamma G] [--widths 256,512,...] [--out DIR] [--eps E]:
the γ a model's init really has, where the norm ε and Adam's ε bite, and how each residual branch starts."""

from __future__ import annotations

import argparse
import sys

HELP = (
    "audit a model's initialization: implied γ per matrix, norm saturation, residual flow, first-step "
    "gradients under Adam's ε (HF config/folder, smallinit run/checkpoint/config name/YAML)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        metavar="TARGET",
        help="a Hugging Face model folder or config.json (built from the config, never downloading), "
        "a smallinit run or checkpoint directory, a config name (tiny, small, 0.1b, ...) or a YAML config",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        default=[],
        metavar="section.key=value",
        help="for a config name/YAML, e.g. model.gamma=0.5",
    )
    p.add_argument(
        "--gamma", type=float, default=1.0, help="the γ-rule to compare with: target σ = fan_in^-γ (default 1)"
    )
    p.add_argument(
        "--widths", metavar="D1,D2,...", help="also rebuild the family at these widths and fit slopes vs width"
    )
    p.add_argument(
        "--out", metavar="DIR", help="write audit.json, audit.md and figures here (new, empty, or a previous audit)"
    )
    p.add_argument(
        "--eps",
        type=float,
        metavar="E",
        help="the optimizer's (Adam) ε (default: the config's optim.eps for smallinit targets, else 1e-8)",
    )
    p.add_argument("--batch", type=int, default=4, help="sequences of random token ids in the sample batch (default 4)")
    p.add_argument(
        "--seq", type=int, default=128, help="tokens per sequence (default 128, capped at the model's maximum)"
    )
    p.add_argument(
        "--blocks", type=int, default=None, help="blocks in the copy audited when the model is too big (default 2)"
    )
    p.add_argument(
        "--max-params",
        type=float,
        default=None,
        help="largest model built whole; bigger ones are audited on a --blocks copy at full width (default 5e8)",
    )
    p.add_argument(
        "--grad-clip",
        type=float,
        default=None,
        help="clip the global gradient norm before counting (default: the config's optim.grad_clip, else off)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the init and of the sample tokens (default 0)")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")


def _widths(text: str | None) -> list[int] | None:
    from smallinit.core.errors import ConfigError

    if not text:
        return None
    try:
        ws = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(f"--widths must be comma-separated integers, got {text!r}") from None
    if len(set(ws)) < 2 or min(ws) < 2:
        raise ConfigError(f"--widths needs at least two distinct integers >= 2, got {text!r}")
    return ws


def _progress():
    """Progress lines on stderr for a person at a terminal (a long build says what it is doing); nothing when
    stderr is a file or a pipe, where a refused command prints its one error line alone."""

    def say(line: str) -> None:
        if sys.stderr.isatty():
            print(line, file=sys.stderr, flush=True)

    return say


def run(args: argparse.Namespace) -> int:
    from smallinit.audit import audit, audit_widths, check_out_dir
    from smallinit.audit.targets import DEFAULT_BLOCKS, DEFAULT_MAX_PARAMS, load_target
    from smallinit.core.errors import ConfigError
    from smallinit.init import check_gamma

    # every input is checked before any model is built
    try:
        gamma = check_gamma(args.gamma, "--gamma")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    widths = _widths(args.widths)
    if args.out:
        check_out_dir(args.out)
    if args.eps is not None and not args.eps >= 0:
        raise ConfigError(f"--eps must be >= 0, got {args.eps}")
    if args.batch < 1 or args.seq < 2:
        raise ConfigError(f"--batch must be >= 1 and --seq >= 2, got {args.batch}, {args.seq}")

    if args.max_params is not None and not 1 <= args.max_params < float("inf"):
        raise ConfigError(f"--max-params must be a finite count >= 1, got {args.max_params}")
    if args.blocks is not None and args.blocks < 1:
        raise ConfigError(f"--blocks must be >= 1, got {args.blocks}")
    if args.grad_clip is not None and not 0 <= args.grad_clip < float("inf"):
        raise ConfigError(f"--grad-clip must be a finite number >= 0 (0 = off), got {args.grad_clip}")
    if not 0 <= args.seed < 2**63:
        raise ConfigError(f"--seed must be an integer in [0, 2^63), got {args.seed}")
    say = _progress()
    say(f"audit: building {args.target} …")  # a 7B config takes a while to build
    tgt = load_target(
        args.target,
        args.overrides,
        max_params=int(args.max_params or DEFAULT_MAX_PARAMS),
        blocks=args.blocks or DEFAULT_BLOCKS,
        seed=args.seed,
        widths=widths or (),
    )
    eps = args.eps if args.eps is not None else (tgt.optimizer_eps if tgt.optimizer_eps is not None else 1e-8)
    clip = args.grad_clip if args.grad_clip is not None else tgt.grad_clip
    kw = dict(
        gamma=gamma, optimizer_eps=eps, grad_clip=clip or None, batch=args.batch, seq_len=args.seq, seed=args.seed
    )
    notes = list(tgt.notes)
    notes.append(
        f"{tgt.full_params / 1e6:.1f}M parameters in the full model; {tgt.audited_params / 1e6:.1f}M built "
        f"for the sample pass (width {tgt.width})."
    )
    say(f"audit: built {tgt.audited_params / 1e6:.1f}M parameters; one forward and backward pass …")
    report = audit(tgt.module, target=tgt.label, notes=notes, **kw)
    del tgt.module
    if widths:
        say(f"audit: rebuilding at widths {', '.join(map(str, widths))} …")
        report.widths = audit_widths(
            lambda w: (tgt.build_at_width(w), None),
            widths,
            notes=[
                f"each width rebuilt as {tgt.label} with heads scaled at fixed head_dim, "
                "d_ff and key/value heads in proportion, the same blocks and vocabulary as "
                "the audited model"
            ],
            known={tgt.width: report},
            **kw,
        )
    print(report.table(width=100))
    if args.out:
        paths = report.save(args.out, figures=not args.no_figures)
        print(f"\nwrote {', '.join(str(p) for p in paths)}")
    return 0
