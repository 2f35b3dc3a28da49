"""The report's Timing section: where a sweep's wall time went."""

from __future__ import annotations

import math


def timing(sweep: dict, rows: list[dict]) -> list[str]:
    """Where the sweep's wall time went (``sweep``: its sweep.json); the overhead per job is what is
    left after training, testing (the test, the predictions and the harness's scores: results.json's
    ``test_time_s``, ``predict_time_s``, ``harness_time_s``) and rank start-up (the target is at most 2 s)."""
    every = [r for r in rows if r.get("status") != "missing"]
    # a sweep continued in its directory: this session's jobs, not those it kept from earlier ones
    ran = [r for r in every if (r.get("started_at") or math.inf) >= (sweep.get("started_at") or 0)]
    ends = [r["started_at"] + r["job_time_s"] for r in ran if r.get("started_at") and r.get("job_time_s")]
    start = sweep.get("started_at") or min((r["started_at"] for r in ran if r.get("started_at")), default=None)
    end = sweep.get("finished_at") or max(ends, default=None)
    if not ran or start is None or end is None:
        return []
    wall, n = end - start, len(ran)
    fit = sum(r.get("fit_time_s") or 0 for r in ran)
    test = sum(r.get(k) or 0 for r in ran for k in ("test_time_s", "predict_time_s", "harness_time_s"))
    jobs = sum(r.get("job_time_s") or 0 for r in ran)
    # A job's time outside its rank 0: validating, starting the ranks, joining the group.
    startup = sum(r["job_time_s"] - (r.get("wall_time_s") or 0) for r in ran if r.get("job_time_s"))
    launcher = sweep.get("launcher") or "unknown"
    lines = [
        "## Timing",
        "",
        f"- sweep: {wall:.1f} s of wall time for {n} jobs (launcher: {launcher})"
        + (f" (this session's; {len(every) - n} kept from before)" if n < len(every) else "")
        + ("" if sweep.get("finished_at") else ", up to the last job's end"),
        f"- in the jobs: training {fit:.1f} s, testing {test:.1f} s, rank start-up {startup:.1f} s "
        f"(validation, starting processes, joining the group), the ranks' own set-up "
        f"{jobs - startup - fit - test:.1f} s (data, model, loggers, checkpoints)",
    ]
    if launcher not in ("basic", "unknown") or jobs > wall * 1.02:
        # Other launchers start each job in a process of its own (often several at once),
        # before the job's clock starts: the rest of the wall time is theirs, not the jobs'.
        lines.append(
            f"- the {launcher} launcher starts jobs in processes of their own, outside the jobs' "
            f"measured time ({jobs:.1f} s of job time in {wall:.1f} s of sweep): "
            "the per-job overhead is computed for the basic launcher only"
        )
    else:
        per_job = (wall - fit - test) / n
        lines.append(
            f"- overhead per job: (wall - training - testing) / jobs = {per_job:.2f} s, "
            f"of which rank start-up {startup / n:.2f} s; beyond it: {per_job - startup / n:.2f} s"
        )
    return lines
