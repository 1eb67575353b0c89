"""lm-evaluation-harness adapter: score a smallinit run with the harness's own tasks.

``lm-eval`` is an optional extra (``pip install 'smallinit[lm-eval]'``, tested with lm-eval 0.4.13);
core smallinit never imports this module. Importing it registers the model class ``smallinit``
(:class:`SmallinitLM`) with the harness. lm-eval finds models only through its registry (it has no
plugin entry points), so run the harness through this module, which registers the class and then
hands the rest of the command line to lm-eval's own CLI::

    python -m smallinit.eval.lm_eval_adapter --model smallinit --model_args path=RUN_DIR \\
        --tasks my_task --include_path TASK_DIR --device cpu --batch_size 16 --output_path results/

Add ``--local_tasks_only`` (ours, removed before lm-eval sees the arguments) to index only the
``--include_path`` folders instead of lm-eval's thousands of built-in task YAMLs, which takes tens of
seconds on a small machine. In Python, ``import smallinit.eval.lm_eval_adapter`` before
``lm_eval.simple_evaluate(model="smallinit", model_args="path=RUN_DIR", ...)``. Local task YAMLs work
offline with ``dataset_path: json`` and ``dataset_kwargs: {data_files: {test: FILE}}``.

``--model_args``: ``path`` (run or checkpoint directory, required), ``step`` (checkpoint step; default the
latest good one), ``max_length`` (context length; default the model's max_seq_len), ``max_gen_toks``
(default 256), ``eot_token`` (token standing in for an empty context and stopping generation; default
``<|endoftext|>``). ``--batch_size`` (an integer; "auto" means 16) and ``--device`` (a CUDA device
falls back to the CPU, with a warning, when CUDA is unavailable) come from the harness's own flags.

All three request types go through :class:`smallinit.eval.LMScorer`, the scorer behind
``smallinit eval``, so the harness and ``smallinit eval`` give the same log-likelihoods for the same
(context, continuation) pairs. Generation is greedy only.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from smallinit.core.device import resolve_device

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the lm-evaluation-harness adapter needs lm-eval: pip install 'smallinit[lm-eval]' "
        f"(or pip install lm-eval); import failed: {e}"
    ) from e

DEFAULT_BATCH = 16


def _batch_size(value: Any) -> int:
    """The harness passes --batch_size as int or str ("16", "auto", "auto:4"); auto -> DEFAULT_BATCH."""
    if value is None or (isinstance(value, str) and value.startswith("auto")):
        return DEFAULT_BATCH
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"batch_size must be an integer or 'auto', got {value!r}") from None
    if n < 1:
        raise ValueError(f"batch_size must be >= 1, got {n}")
    return n


def _device(value: Any) -> str:
    return str(resolve_device(value or "cpu", fallback=True))


class SmallinitLM(LM):
    """A smallinit checkpoint as an lm-eval ``LM`` (model_args in the module docstring)."""

    def __init__(
        self,
        path: str,
        step: int | str | None = None,
        batch_size: int | str | None = DEFAULT_BATCH,
        device: str | None = None,
        max_length: int | str | None = None,
        max_gen_toks: int | str = 256,
        eot_token: str | None = None,
        max_batch_size: Any = None,
        **unused: Any,
    ):
        super().__init__()
        from smallinit.eval.scorer import EOT, LMScorer
        from smallinit.runs.checkpoint import load_checkpoint, load_run_tokenizer

        if unused:
            warnings.warn(f"smallinit model ignores model_args {sorted(unused)}", stacklevel=2)
        model = load_checkpoint(path, step=None if step in (None, "") else int(step))
        tokenizer = load_run_tokenizer(path)
        token = eot_token or EOT
        eot_id = tokenizer.token_to_id(token)
        if eot_id is None:
            raise ValueError(f"tokenizer of {path} has no token {token!r}; pass eot_token=<a special token it has>")
        self._device = _device(device)
        self.scorer = LMScorer(
            model,
            tokenizer,
            batch_size=_batch_size(batch_size),
            device=self._device,
            max_length=int(max_length) if max_length else None,
            eot_id=eot_id,
            max_gen_toks=int(max_gen_toks),
        )
        self.path = str(path)

    @property
    def tokenizer_name(self) -> str:
        return f"smallinit:{self.path}"

    def _run(self, kind: str, requests: list, fn, disable_tqdm: bool):
        args = [req.args for req in requests]
        self.scorer.progress, self.scorer.progress_desc = not disable_tqdm, "lm-eval"
        results = fn(args)
        for a, r in zip(args, results):
            self.cache_hook.add_partial(kind, a, r)
        return results

    def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """[(sum log p(continuation | context), is_greedy)] for Instances with args (context, continuation)."""
        return self._run("loglikelihood", requests, self.scorer.loglikelihood, disable_tqdm)

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """[log p(text | eot)] for Instances with args (text,)."""
        return self._run(
            "loglikelihood_rolling",
            requests,
            lambda args: self.scorer.loglikelihood_rolling([a[0] for a in args]),
            disable_tqdm,
        )

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations for Instances with args (context, gen_kwargs: until, max_gen_toks; do_sample=True
        is refused)."""
        return self._run("generate_until", requests, self.scorer.generate_until, disable_tqdm)


# ``@register_model("smallinit")``, applied unless this file runs as ``__main__`` (``python -m``): then the
# importable module registers its own class below, so one class, not two copies, holds the name.
if __name__ != "__main__":
    SmallinitLM = register_model("smallinit")(SmallinitLM)


LOCAL_ONLY_FLAG = "--local_tasks_only"


def main(argv: list[str] | None = None) -> None:
    """lm-eval's command line with the ``smallinit`` model registered (arguments as for ``lm_eval``).

    One extra flag, ``--local_tasks_only``, is taken out before lm-eval parses the rest: it makes the
    harness index only the ``--include_path`` folders, not its thousands of built-in task YAMLs (which
    takes tens of seconds on a small machine); the built-in tasks are then not available.
    """
    import lm_eval.models  # noqa: F401  (the built-in models stay available, as in lm_eval's own CLI)
    from lm_eval.__main__ import cli_evaluate

    args = list(sys.argv[1:] if argv is None else argv)
    if LOCAL_ONLY_FLAG in args:
        args = [a for a in args if a != LOCAL_ONLY_FLAG]
        _index_include_path_only()
    sys.argv = ["lm_eval", *args]
    cli_evaluate()


def _index_include_path_only() -> None:
    """Make ``lm_eval.tasks.TaskManager`` default to ``include_defaults=False`` (lm-eval's CLI has no flag for it)."""
    import lm_eval.tasks

    base = lm_eval.tasks.TaskManager

    class LocalTaskManager(base):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, include_defaults: bool = False, **kw: Any) -> None:
            super().__init__(*a, include_defaults=include_defaults, **kw)

    lm_eval.tasks.TaskManager = LocalTaskManager


if __name__ == "__main__":
    from smallinit.eval.lm_eval_adapter import main as _main  # imports (and registers) the real module

    _main()
