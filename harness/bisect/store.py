"""A bisect's folder: what was asked, one JSON per judged point, and the answer.

    bisect.json        the history, the probe, and the list of points (fixed at the start)
    steps/NNNN-ID.json one per judged point, written once, whole (atomic rename)
    logs/NNNN-ID.log   what the probe printed for that point
    result.json/.md    the answer, rewritten after every step

A step file's presence is what "judged" means: a resumed bisect reads them and never judges
those points again; the point list is read back from bisect.json, not from the index or the
repository, so a resume sees the same history.

The folder is a root (harness.safety.roots): a link under it (steps/, logs/, a step file) is
refused, never followed, and every file is read with a size and nesting bound.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.bisect.history import Point
from harness.bisect.search import VERDICTS
from harness.errors import ConfigError
from harness.redact import redact_json, redact_text
from harness.results.store import utc_now
from harness.safety import grammar
from harness.safety.paths import MiB
from harness.safety.roots import Root

FORMAT = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _bad(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path}: {why}", hint="give the folder of a `harness bisect` run, or a new --out folder")


class BisectStore:
    def __init__(self, folder: Path, spec: dict, points: list[Point], preferred: set[int]) -> None:
        self.dir, self.spec, self.points, self.preferred = Path(folder), spec, points, preferred
        self.root = Root(self.dir, what="bisect folder")

    @classmethod
    def create(cls, folder: Path, spec: dict, points: list[Point], preferred: set[int]) -> BisectStore:
        root = Root(folder, what="--out", create=True)
        if root.exists("bisect.json"):
            raise _bad(Path(folder), "holds a bisect already (resume it with --resume)")
        store = cls(Path(folder), spec, points, preferred)
        store._write_json("bisect.json", {
            "format": FORMAT, "created": utc_now(), **spec, "preferred": sorted(preferred),
            "points": [{"id": p.id, "title": p.title, "date": p.date} for p in points]})
        return store

    @classmethod
    def open(cls, folder: Path) -> BisectStore:
        path = Path(folder) / "bisect.json"
        try:
            doc = Root(folder, what="bisect folder").load_json("bisect.json", limit=64 * MiB)
        except FileNotFoundError:
            raise _bad(path.parent, "no bisect.json: not a bisect folder") from None
        try:
            if doc.get("format") != FORMAT:
                raise _bad(path, f"format {doc.get('format')!r}, this version reads {FORMAT}")
            points = [Point(_text(p["id"]), _text(p.get("title", "")), _text(p.get("date", ""))) for p in doc["points"]]
            spec = {"history": dict(doc["history"]), "probe": dict(doc["probe"]), "setup": dict(doc.get("setup") or {})}
            preferred = {int(i) for i in doc.get("preferred", [])}
            # a point id reaches git (`git archive ID`) or a file name: checked against its grammar
            field = "sha" if spec["history"].get("kind") == "git" else "version"
            for p in points:
                grammar.check(field, p.id, where=f"{path}: point id", hint="start a new bisect")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise _bad(path, f"unreadable ({type(exc).__name__}: {str(exc)[:200]})") from None
        return cls(path.parent, spec, points, preferred)

    def _write_json(self, rel: str, obj: dict) -> None:
        # masked like every file the tool writes (an --index URL's token, a probe's --api-key)
        self.root.save_text(rel, json.dumps(redact_json(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n")

    def _name(self, index: int) -> str:
        return f"{index:04d}-{_UNSAFE.sub('_', self.points[index].short)}"

    def step_path(self, index: int) -> Path:
        return self.dir / "steps" / f"{self._name(index)}.json"

    def log_path(self, index: int) -> Path:
        """Where a point's probe log goes: logs/ made under the root (never a link); the log
        itself is written through harness.safety.writes, which never writes through a link."""
        return self.root.mkdir("logs") / f"{self._name(index)}.log"

    def steps(self) -> dict[int, dict]:
        out: dict[int, dict] = {}
        for name in self.root.files("steps", suffix=".json"):
            path = self.dir / "steps" / name
            hint = "delete it to judge that point again"
            step = self.root.load_json(f"steps/{name}", limit=16 * MiB, hint=hint)
            try:
                index = int(step["index"])
                ok = (0 <= index < len(self.points) and step["verdict"] in VERDICTS
                      and self.points[index].id == step["id"] and isinstance(step.get("reason", ""), str))
            except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
                raise _bad(path, f"unreadable step ({type(exc).__name__}: {str(exc)[:200]}): {hint}") from None
            if not ok:
                raise _bad(path, f"does not match this bisect's points: {hint}")
            out[index] = step
        return out

    def write_step(self, step: dict) -> None:
        self._write_json(f"steps/{self._name(step['index'])}.json", step)

    def save_text(self, rel: str, text: str) -> Path:
        return self.root.save_text(rel, text)

    def write_result(self, result: dict, markdown: str) -> None:
        self._write_json("result.json", result)
        self.root.save_text("result.md", redact_text(markdown))
