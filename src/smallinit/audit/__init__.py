"""Audit a model's initialization: the γ it really has, where the norm ε and Adam's ε bite, how big each
residual branch starts (``smallinit audit``; DESIGN.md §2 for every definition).

    report = smallinit.audit(model, gamma=1.0, optimizer_eps=1e-8)   # any nn.Module; LMs get random token ids
    print(report.summary()); print(report.table())
    report.save("audit-out")                                          # audit.json, audit.md, figures

The package, one job a module:

* :mod:`~smallinit.audit.measure` — :func:`audit`: one forward + backward pass of a sample batch, and what is
  measured on it (every definition is in its docstring);
* :mod:`~smallinit.audit.widths` — :func:`audit_widths`: the family rebuilt at several widths, log-log slopes;
* :mod:`~smallinit.audit.rows` — the rows (per matrix, norm, branch, width fit) and the saturation thresholds;
* :mod:`~smallinit.audit.report` — :class:`AuditReport`: summary, terminal table, markdown, JSON, save / load;
* :mod:`~smallinit.audit.text` and :mod:`~smallinit.audit.figures` — cell formatting; ``audit.png`` and
  ``audit_widths.png``;
* :mod:`~smallinit.audit.targets` — what ``smallinit audit TARGET`` builds (a Hugging Face config, a smallinit
  run, checkpoint, config name or YAML), and :mod:`~smallinit.audit.width_family` — a config at another width for
  ``--widths``; neither imported here.
"""

from __future__ import annotations

from smallinit.audit.figures import plot_audit
from smallinit.audit.measure import audit, grad_eps_stats, implied_gamma, random_tokens
from smallinit.audit.report import AUDIT_KIND, AuditReport, check_out_dir, load_report
from smallinit.audit.rows import (
    EPS_AFFECTED,
    EPS_DOMINATED,
    BranchAudit,
    MatrixAudit,
    NormAudit,
    WidthFit,
    WidthStudy,
    layer_kind,
)
from smallinit.audit.widths import audit_widths, loglog_slope, width_quantities

__all__ = [
    "AUDIT_KIND",
    "AuditReport",
    "BranchAudit",
    "EPS_AFFECTED",
    "EPS_DOMINATED",
    "MatrixAudit",
    "NormAudit",
    "WidthFit",
    "WidthStudy",
    "audit",
    "audit_widths",
    "check_out_dir",
    "grad_eps_stats",
    "implied_gamma",
    "layer_kind",
    "load_report",
    "loglog_slope",
    "plot_audit",
    "random_tokens",
    "width_quantities",
]
