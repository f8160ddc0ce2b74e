"""How far a run is, how fast it goes and when it will be done, as every view shows it.

The rate is taken over the last ``WINDOW_S`` seconds of the slowest rank's progress reports
in the current attempt only (a restart's gap and the steps it went back over count for
nothing), as tqdm takes its rate over recent iterations. While no report comes, the rate
is not held at its last figure: once the usual interval between reports has passed it
falls as if the next report came now, and after ``STALLED_AFTER_S`` seconds (or four usual
intervals, if longer) without one, or while the supervisor names a stalled rank or one
waits in the debugger, there is no rate and no ETA, only how long the run has been
stalled. The widget, the Lab view, the text monitor and ``show`` all read this.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ...core.units import fmt_duration, fmt_seconds
from ...store.follow import Progress, RunFollower
from .health import debugging_of, stalled_of

WINDOW_S = 30.0
STALLED_AFTER_S = 10.0
USUAL_INTERVALS = 4  # reports missed before a run with sparse reports counts as stalled


@dataclass
class ProgressFigures:
    done: float
    total: float | None
    rate: float | None  # steps a second; None: not known yet, or stalled
    eta: float | None  # seconds to the end at that rate
    stalled: float | None  # seconds since the last report, once that counts as stalled
    attempt: int
    ranks: int

    def payload(self) -> dict[str, float | int | None]:
        """The widget's ``progress``: ``done``, ``total``, ``rate``, ``eta``, ``ranks``,
        and ``stalled`` (seconds, or None) and ``attempt``."""
        return {
            "done": self.done,
            "total": self.total,
            "rate": self.rate,
            "eta": self.eta,
            "ranks": self.ranks,
            "stalled": self.stalled,
            "attempt": self.attempt,
        }

    def words(self) -> str:
        """``step 120/500 (24%) 1.93/s ETA 3:18``, or ``... stalled 45s``."""
        text = f"step {self.done:g}"
        if self.total:
            text += f"/{self.total:g} ({100 * self.done / self.total:.0f}%)"
        if self.stalled is not None:
            return text + f" stalled {fmt_seconds(self.stalled)}"
        if self.rate:
            text += f" {self.rate:.3g}/s"
        if self.eta is not None:
            text += f" ETA {fmt_duration(self.eta)}"
        return text


def progress_figures(follower: RunFollower, now: float | None = None) -> ProgressFigures | None:
    """The figures of ``follower``'s run as it has read it (None before any report)."""
    prog = follower.overall_progress()
    if prog is None:
        return None
    now = time.time() if now is None else now
    state = follower.state
    finished = follower.finished
    rate = eta = stalled = None
    window = _window(list(follower.recent.get(prog.rank, ())), prog)
    silence = 0.0 if finished else max(0.0, now - prog.t)
    usual = None
    if len(window) > 1 and window[-1].t > window[0].t and window[-1].done > window[0].done:
        span = window[-1].t - window[0].t
        usual = span / (len(window) - 1)
        rate = (window[-1].done - window[0].done) / (span + max(0.0, silence - usual))
    held = state.get("status") == "running" and (stalled_of(state, now) or debugging_of(state))
    if not finished and (held or silence > max(STALLED_AFTER_S, USUAL_INTERVALS * (usual or 0))):
        rate, stalled = None, silence
    if rate and prog.total and not finished:
        eta = max(0.0, prog.total - prog.done) / rate
    return ProgressFigures(
        prog.done, prog.total, rate, eta, stalled, prog.attempt, len(follower.progress)
    )


def _window(recent: list[Progress], newest: Progress) -> list[Progress]:
    """The reports of the last ``WINDOW_S`` seconds up to ``newest`` in its attempt, from
    after the last time the count went down (a loop that counts each epoch anew)."""
    out = [newest]
    for report in reversed(recent):
        if report is newest:
            continue
        if (
            report.attempt != newest.attempt
            or newest.t - report.t > WINDOW_S
            or report.done > out[-1].done
            or report.t > out[-1].t
        ):
            break
        out.append(report)
    return out[::-1]
