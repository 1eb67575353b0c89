"""Experiments: sweeps over config fields, the anchor-function reasoning probe, the claim verdict rules,
the reproduction suite (``smallinit reproduce``) and its report.

    from smallinit.experiments.sweep import load_sweep, run_sweep
    spec = load_sweep("src/smallinit/configs/sweeps/example.yaml")
    results = run_sweep(spec, "out/sweep", jobs=2)

Modules: :mod:`~smallinit.experiments.sweep` (grid/list expansion, resumable job runner, summaries),
:mod:`~smallinit.experiments.anchor` (the anchor-function task), :mod:`~smallinit.experiments.claims`
(effects and verdicts), :mod:`~smallinit.experiments.reproduce` (presets, plan, analysis) and
:mod:`~smallinit.experiments.report` (markdown, HTML and plots).
"""
