"""Benchmark evaluation of causal language models from local files.

``LMScorer`` (scorer.py) turns any ``model(idx) -> logits`` plus a ``tokenizers.Tokenizer`` into the
three lm-evaluation-harness requests (loglikelihood, loglikelihood_rolling, generate_until);
``run_tasks`` (tasks.py) runs the registered benchmarks (``TASKS``) or YAML-defined multiple-choice
tasks on top of it; ``results_markdown`` prints a table. File formats are documented in
multiple_choice.py, lambada.py, blimp.py and generation.py; answer extraction in answers.py.
"""

from smallinit.eval.data import TaskResult
from smallinit.eval.scorer import LMScorer
from smallinit.eval.tasks import TASKS, TaskOptions, parse_tasks, results_markdown, run_tasks

__all__ = ["LMScorer", "TASKS", "TaskOptions", "TaskResult", "parse_tasks", "results_markdown", "run_tasks"]
