"""What the report says of the sweep's session: which jobs it kept, resumed and ran (a sweep continued
in its directory), and, for a sweep stopped by a signal, which jobs never started and how to continue it."""

from __future__ import annotations

# sweep.json's "study" (hydra_plugins/framework_sweeper/study_launcher.py): this session's jobs.
SAID = {
    "kept": "kept {} (finished with the same config: not run again)",
    "resumed": "resumed {} from checkpoints/last",
    "afresh": "ran {} again afresh (no checkpoint to resume from)",
    "new": "ran {}",
}


def session_lines(sweep: dict) -> list[str]:
    """The session's line (for a sweep continued in its directory) and the stop's (for a stopped one)."""
    lines = []
    study = sweep.get("study") or {}
    if (sweep.get("session") or 1) > 1 or study.get("kept") or study.get("resumed") or study.get("afresh"):
        said = [SAID[a].format(", ".join(sorted(map(str, study[a]), key=_number))) for a in SAID if study.get(a)]
        lines += [
            f"Continued in its directory (session {sweep.get('session') or '?'}): {'; '.join(said) or 'no job'}.",
            "",
        ]
    return lines + _stopped(sweep)


def _number(name: str) -> tuple:
    return (not name.isdigit(), int(name) if name.isdigit() else 0, name)


def _stopped(sweep: dict) -> list[str]:
    """A sweep stopped by a signal: its report lists only the jobs that started, so say so, and how to continue it."""
    if sweep.get("stopped_by_signal") is None:
        return []
    never = sweep.get("never_started")  # None: the launcher did not know its jobs ahead
    if never is None:
        rest = "the jobs after these never started"
    elif never:
        rest = f"job(s) {', '.join(map(str, never))} never started"
    else:
        rest = "every job had started"
    lines = [f"Stopped by signal {sweep['stopped_by_signal']} before its end: {rest}."]
    if sweep.get("command"):
        lines += [
            "Continue it (finished jobs are kept, interrupted ones resume from checkpoints/last, the rest run):",
            "",
            "```",
            sweep["command"],
            "```",
        ]
    return lines + [""]
