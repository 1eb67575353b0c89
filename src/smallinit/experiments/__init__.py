"""Experiments: sweeps over config fields, the anchor-function reasoning probe, and the reproduction of the
paper's claims (``smallinit reproduce``).

    from smallinit.experiments.sweep import load_sweep, run_sweep
    spec = load_sweep("src/smallinit/configs/sweeps/example.yaml")
    results = run_sweep(spec, "out/sweep", jobs=2)

Modules:

- :mod:`~smallinit.experiments.job` — a job is a library call (task ``train`` or ``anchor`` + its typed config);
  ``python -m smallinit.experiments.job JOBFILE`` is the subprocess entry;
  :mod:`~smallinit.experiments.runner` runs many (parallel, resumable, with ETA); :mod:`~smallinit.experiments.cost`
  counts parameters/FLOPs and measures throughput;
- :mod:`~smallinit.experiments.sweep` — sweep files (grid/list) and their summary tables;
- :mod:`~smallinit.experiments.anchor` — the anchor-function task;
- :mod:`~smallinit.experiments.presets` (what a reproduction runs, as data), :mod:`~smallinit.experiments.plan`
  (claims' arms → jobs; the corpus), :mod:`~smallinit.experiments.lr` (learning-rate selection),
  :mod:`~smallinit.experiments.reproduce` (plan, run, analyse) and :mod:`~smallinit.experiments.report`
  (renders Markdown and HTML);
- :mod:`~smallinit.experiments.claims` — one module per claim (arms, analysis, verdict rule, figures), the shared
  rule machinery (``claims/rules.py``) and what an analysis gets (``claims/context.py``).
"""
