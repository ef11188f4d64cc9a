"""A bisect's folder: what was asked, one JSON per judged point, and the answer.

    bisect.json        the history, the probe, and the list of points (fixed at the start)
    steps/NNNN-ID.json one per judged point, written once, whole (atomic rename)
    logs/NNNN-ID.log   what the probe printed for that point
    result.json/.md    the answer, rewritten after every step

A step file's presence is what "judged" means: a resumed bisect reads them and never judges
those points again; the point list is read back from bisect.json, not from the index or the
repository, so a resume sees the same history.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.bisect.history import Point
from harness.bisect.search import VERDICTS
from harness.errors import ConfigError
from harness.redact import redact_json, redact_text
from harness.results.store import atomic_write_json, atomic_write_text, utc_now

FORMAT = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _bad(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path}: {why}", hint="give the folder of a `harness bisect` run, or a new --out folder")


class BisectStore:
    def __init__(self, folder: Path, spec: dict, points: list[Point], preferred: set[int]) -> None:
        self.dir, self.spec, self.points, self.preferred = Path(folder), spec, points, preferred

    @classmethod
    def create(cls, folder: Path, spec: dict, points: list[Point], preferred: set[int]) -> BisectStore:
        folder = Path(folder)
        if (folder / "bisect.json").exists():
            raise _bad(folder, "holds a bisect already (resume it with --resume)")
        # masked like every file the tool writes (an --index URL's token, a probe's --api-key)
        atomic_write_json(folder / "bisect.json", redact_json({
            "format": FORMAT, "created": utc_now(), **spec, "preferred": sorted(preferred),
            "points": [{"id": p.id, "title": p.title, "date": p.date} for p in points]}))
        return cls(folder, spec, points, preferred)

    @classmethod
    def open(cls, folder: Path) -> BisectStore:
        path = Path(folder) / "bisect.json"
        try:
            doc = json.loads(path.read_text())
            points = [Point(p["id"], p.get("title", ""), p.get("date", "")) for p in doc["points"]]
            spec = {"history": doc["history"], "probe": doc["probe"], "setup": doc.get("setup", {})}
            preferred = {int(i) for i in doc.get("preferred", [])}
        except FileNotFoundError:
            raise _bad(path.parent, "no bisect.json: not a bisect folder") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise _bad(path, f"unreadable ({exc})") from None
        if doc.get("format") != FORMAT:
            raise _bad(path, f"format {doc.get('format')!r}, this version reads {FORMAT}")
        return cls(path.parent, spec, points, preferred)

    def _name(self, index: int) -> str:
        return f"{index:04d}-{_UNSAFE.sub('_', self.points[index].short)}"

    def step_path(self, index: int) -> Path:
        return self.dir / "steps" / f"{self._name(index)}.json"

    def log_path(self, index: int) -> Path:
        path = self.dir / "logs" / f"{self._name(index)}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def steps(self) -> dict[int, dict]:
        out: dict[int, dict] = {}
        for path in sorted((self.dir / "steps").glob("*.json")):
            try:
                step = json.loads(path.read_text())
                index = int(step["index"])
                ok = step["verdict"] in VERDICTS and self.points[index].id == step["id"]
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise _bad(path, f"unreadable step ({exc}): delete it to judge that point again") from None
            if not ok:
                raise _bad(path, "does not match this bisect's points: delete it to judge that point again")
            out[index] = step
        return out

    def write_step(self, step: dict) -> None:
        atomic_write_json(self.step_path(step["index"]), redact_json(step))

    def write_result(self, result: dict, markdown: str) -> None:
        atomic_write_json(self.dir / "result.json", redact_json(result))
        atomic_write_text(self.dir / "result.md", redact_text(markdown))
