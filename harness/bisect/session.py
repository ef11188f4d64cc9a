"""The bisect loop: judge both ends, then the middle point until one point is left.

A comparing probe's verdict is defined here, once: the good endpoint's decision is the
reference; any other point is good when its decision is equal to the reference in every
compared field (each kernel family's arch list, in the order printed, or "not built"), bad when
any field differs. A point that cannot be judged is a skip, with its reason: its source cannot
be had, a patch of the stack does not apply, the build or configure fails before the decision,
or the probe raised.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness import git
from harness.bisect.history import History, Point, Unavailable
from harness.bisect.probes import Decision, Observation, Probe
from harness.bisect.search import BAD, GOOD, SKIP, Verdict, narrow, next_point
from harness.bisect.store import BisectResult, BisectStore, Side, Step, StepLine, Suspect
from harness.errors import ConfigError
from harness.image.preflight import apply_series
from harness.results.store import utc_now
from harness.safety import writes


class Display(Protocol):
    def start(self, step: int, about: int, point: Point) -> None: ...
    def done(self, step: int, about: int, point: Point, record: Step) -> None: ...


@dataclass(frozen=True)
class Setup:
    patches: tuple[tuple[str, Path], ...] = ()  # applied, in order, to every point's tree


def _patch(tree: Path, patches) -> str | None:
    """None when every patch applies; else the reason (the first that does not)."""
    if not patches:
        return None
    git.run(["init", "-q", "--", str(tree)], timeout=60)  # git apply works in this tree only
    result = apply_series(tree, list(patches), project="source", in_place=True)
    return None if result.ok else "a patch does not apply: " + "; ".join(result.problems())


def observe(history: History, probe: Probe, setup: Setup, point: Point, logs: Path) -> Observation:
    """One point, never raising: what cannot be judged comes back as a skip with its reason."""
    work = Path(tempfile.mkdtemp(prefix="harness-bisect-"))
    tree = work / "src"
    try:
        try:
            history.unpack(point, tree)
        except Unavailable as exc:
            return Observation(SKIP, None, f"no source: {exc}")
        if why := _patch(tree, setup.patches):
            return Observation(SKIP, None, why)
        return probe.observe(tree, point, logs)
    except Exception as exc:  # noqa: BLE001 - a crashing probe is a skip with its reason, not a crash
        writes.write_text(logs, traceback.format_exc(), flag="probe log")
        return Observation(SKIP, None, f"the probe crashed: {type(exc).__name__}: {str(exc)[:300]}",
                           {"traceback_in": str(logs)})
    finally:
        shutil.rmtree(work, ignore_errors=True)


class Bisect:
    def __init__(self, store: BisectStore, history: History, probe: Probe, setup: Setup, display: Display) -> None:
        self.store, self.history, self.probe, self.setup, self.display = store, history, probe, setup, display
        self.steps = store.steps()

    @property
    def n(self) -> int:
        return len(self.store.points)

    def verdicts(self) -> dict[int, Verdict]:
        return {i: s.verdict for i, s in self.steps.items()}

    def _reference(self) -> Decision | None:
        """The good endpoint's decision. The ends are judged first (run), so every other point
        and the answer find it."""
        return self.steps[0].decision

    def judge(self, index: int) -> Step:
        point = self.store.points[index]
        step_no = len(self.steps) + 1
        ends = sum(1 for e in (0, self.n - 1) if e not in self.steps)
        about = len(self.steps) + ends + narrow(self.n, self.verdicts()).steps_left  # at most, with no skips
        self.display.start(step_no, about, point)
        t0 = time.monotonic()
        started = utc_now()
        obs = observe(self.history, self.probe, self.setup, point, self.store.log_path(index))
        verdict = obs.verdict
        if verdict is None:  # a comparing probe: the good endpoint is the reference
            verdict = GOOD if index == 0 or obs.decision == self._reference() else BAD
        record = Step(index=index, id=point.id, title=point.title, date=point.date, step=step_no, verdict=verdict,
                      reason=obs.reason, decision=obs.decision, detail=obs.detail, started=started,
                      seconds=round(time.monotonic() - t0, 1))
        self.store.write_step(record)
        self.steps[index] = record
        self.display.done(step_no, about, point, record)
        return record

    def _check_ends(self) -> None:
        pts = self.store.points
        for end, said in ((0, GOOD), (self.n - 1, BAD)):
            step = self.steps[end]
            # as `git bisect run`, which never tests the ends: the user's word stands where a
            # direct probe cannot judge an end (a comparing probe needs both decisions)
            if step.verdict == SKIP and not self.probe.compares:
                step = step.model_copy(update={
                    "verdict": said, "reason": f"as given by --{said} (the probe skipped it: {step.reason})"})
                self.store.write_step(step)
                self.steps[end] = step
        good, bad = self.steps[0], self.steps[self.n - 1]
        if good.verdict != GOOD:
            raise ConfigError(f"--good {pts[0].short} was judged {good.verdict}: {good.reason}",
                              hint="give a --good point the probe judges good (see its log in "
                                   f"{self.store.log_path(0)})")
        if bad.verdict == SKIP:
            raise ConfigError(f"--bad {pts[-1].short} could not be judged: {bad.reason}",
                              hint=f"give another --bad point (see {self.store.log_path(self.n - 1)})")
        if bad.verdict != BAD:
            same = " (same decision as --good)" if self.probe.compares else ""
            raise ConfigError(f"--bad {pts[-1].short} was judged good{same}: nothing to bisect",
                              hint="give a --bad point where the verdict differs from --good")

    def run(self) -> BisectResult:
        if self.n < 2:
            raise ConfigError("the history holds fewer than two points", hint="check --good and --bad")
        for end in (0, self.n - 1):
            if end not in self.steps:
                self.judge(end)
        self._check_ends()
        while (index := next_point(self.n, self.verdicts(), self.store.preferred)) is not None:
            self.judge(index)
        return self.result()

    def result(self) -> BisectResult:
        r = narrow(self.n, self.verdicts())
        pts = self.store.points
        spec = self.store.spec

        def side(i: int) -> Side:
            s = self.steps[i]
            return Side(id=pts[i].id, title=pts[i].title, date=pts[i].date, verdict=s.verdict, reason=s.reason,
                        decision=s.decision)

        judged = [self.steps[i] for i in sorted(self.steps)]
        return BisectResult(
            history=spec.history, probe=spec.probe, setup=spec.setup, points=self.n, done=r.done,
            first_bad=side(r.bad) if r.done and not r.skipped else None,
            suspects=[Suspect(id=pts[i].id, title=pts[i].title) for i in r.suspects] if r.done else [],
            last_good=side(r.good), bad_side=side(r.bad),
            reference=self._reference() if self.probe.compares else None,
            steps=[StepLine(step=s.step, index=s.index, id=s.id, title=s.title, verdict=s.verdict, reason=s.reason,
                            seconds=s.seconds) for s in sorted(judged, key=lambda s: s.step)],
            seconds=round(sum(s.seconds for s in judged), 1))
