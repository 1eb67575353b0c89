"""The job runner's cluster loop (``--launcher slurm``): which pending jobs are submitted when, and what each ending
means — the same policy as the local loop in :mod:`smallinit.experiments.runner` (a finished run is done, an
interrupted one is submitted again where the launcher allows, a job behind one that did not finish is blocked); the
launcher (:mod:`smallinit.experiments.launcher`) only submits, waits and reads exit statuses.
"""

from __future__ import annotations

import time
from typing import Any

from smallinit.experiments.job import Job


class ClusterLoop:
    """The part of :class:`~smallinit.experiments.runner.JobRunner` that runs its jobs as cluster jobs; it uses the
    runner's state (``launcher``, ``results``, ``_by_name``, ``log``) and policy (``_finish``, ``_blocker``,
    ``_block``, ``_report``, ``_never_ran``)."""

    launcher: Any
    results: dict[str, Any]  # name → JobResult
    _by_name: dict[str, Job]

    def _run_launched(self, pending: list[Job], index: dict[str, int], n: int) -> dict[str, Any]:
        """``pending`` as cluster jobs: the launcher submits and waits; what starts when and what each ending means
        (:meth:`_finish`) stay the runner's. Jobs whose ``after`` have ended go as one array; on SLURM, jobs whose
        ``after`` are in flight are queued behind them (afterok), and taken back (cancelled) when one does not finish
        (then blocked) or is submitted again (``Launcher.again``: then queued behind its new job)."""
        launcher, waiting = self.launcher, list(pending)
        flying: dict[str, tuple[Any, float, bool]] = {}  # name → (submitted job, start time, resumed)
        while waiting or flying:
            while groups := self._submittable(waiting, flying, index, n):  # then what can queue behind those
                for dependency, group in groups.items():
                    t0, resumed = time.time(), [j.state() == "partial" and j.resumable for j in group]
                    for j, s, r in zip(group, launcher.submit_jobs(group, dependency, self.log), resumed):
                        flying[j.name] = (s, t0, r)
            if not flying:  # never expected: a dependency cycle
                self._never_ran(waiting, index, n)
                break
            ended = launcher.wait([v[0] for v in flying.values()], self.log)
            for name in [k for k, v in flying.items() if v[0] in ended]:
                if name not in flying:  # queued behind a job that ended just now: taken back already
                    continue
                s, t0, resumed = flying.pop(name)
                job = self._by_name[name]
                rc = launcher.exit_status(s, job)
                again = (rc < 0 or rc >= 128) and job.resumable and launcher.again(s, job.run_dir, self.log)
                if again:
                    waiting.append(job)
                else:
                    self._report(self._finish(job, rc, t0, resumed), index, n, waiting, {})
                if again or self.results[name].state != "done":
                    for k in [k for k in flying if name in self._by_name[k].after]:
                        launcher.cancel(flying.pop(k)[0])
                        waiting.append(self._by_name[k])
            waiting.sort(key=lambda j: index[j.name])
        return self.results

    def _submittable(self, waiting: list[Job], flying: dict[str, Any], index, n) -> dict[str | None, list[Job]]:
        """The waiting jobs that can be submitted now, taken out of ``waiting``, by dependency (None: none); the ones
        whose ``after`` did not finish are reported blocked."""
        groups: dict[str | None, list[Job]] = {}
        for j in list(waiting):
            deps = [d for d in j.after if d in self._by_name]
            if (blocked := self._blocker(j)) is not None:
                waiting.remove(j)
                self._block(j, blocked, index, n, waiting, {})
            elif all(d in self.results for d in deps):
                waiting.remove(j)
                groups.setdefault(None, []).append(j)
            elif self.launcher.slurm and all(d in self.results or d in flying for d in deps):
                waiting.remove(j)
                ids = ":".join(flying[d][0].job_id for d in deps if d in flying)
                groups.setdefault(f"afterok:{ids}", []).append(j)
        return groups
