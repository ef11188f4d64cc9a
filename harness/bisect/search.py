"""The bisection itself: pure functions over indexes 0 (good) .. n-1 (bad) and known verdicts.

Like `git bisect`: the answer lies in (last good, first bad]; the next point is the middle
untested one; a skipped point is left out of the choice, and when only skipped points remain
between the two, the answer is a range (the skipped points and the first bad one), as git says
"the first bad commit could be any of". `preferred` points (a release list's newest patch per
minor) are tried first while any remains inside the range, then the rest: a coarse pass, then
a fine one, in one search.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final, Literal

Verdict = Literal["good", "bad", "skip"]
GOOD: Final = "good"
BAD: Final = "bad"
SKIP: Final = "skip"
VERDICTS: tuple[Verdict, ...] = (GOOD, BAD, SKIP)


@dataclass(frozen=True)
class Range:
    good: int  # the last good index before `bad`
    bad: int  # the first bad index
    untested: tuple[int, ...]  # strictly between, not judged yet
    skipped: tuple[int, ...]  # strictly between, skipped

    @property
    def done(self) -> bool:
        return not self.untested

    @property
    def steps_left(self) -> int:
        """About how many more points to judge (log2 of what remains, as git prints)."""
        return math.ceil(math.log2(len(self.untested) + 1)) if self.untested else 0

    @property
    def suspects(self) -> tuple[int, ...]:
        """When done: the points that may be the first bad one (one, unless skips hide it)."""
        return (*self.skipped, self.bad)


def narrow(n: int, verdicts: Mapping[int, str]) -> Range:
    """The range left by `verdicts` (index -> good/bad/skip) over n points, 0 good and n-1 bad."""
    bad = min([i for i, v in verdicts.items() if v == BAD] + [n - 1])
    good = max([i for i, v in verdicts.items() if v == GOOD and i < bad] + [0])
    inside = range(good + 1, bad)
    skipped = {i for i, v in verdicts.items() if v == SKIP}
    return Range(good, bad, tuple(i for i in inside if i not in verdicts), tuple(i for i in inside if i in skipped))


def next_point(n: int, verdicts: Mapping[int, str], preferred: Collection[int] = ()) -> int | None:
    """The index to judge next, or None when the range cannot narrow further."""
    r = narrow(n, verdicts)
    if r.done:
        return None
    pool = [i for i in r.untested if i in preferred] or list(r.untested)
    return pool[(len(pool) - 1) // 2]  # the middle of what remains; a tie goes to the older point
