"""mypy on harness/ (config: pyproject.toml [tool.mypy]) held against a baseline.

    python tools/mypy_baseline.py            # fails on any error not in tools/mypy-baseline.txt
    python tools/mypy_baseline.py --update   # after fixing some: write what is left

The baseline lists each error mypy still reports (file, message, code; no line numbers, so an
edit elsewhere in a file does not move it). New code adds none: an error outside it fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tools" / "mypy-baseline.txt"
_ERROR = re.compile(r"^(?P<file>[^:]+):\d+: error: (?P<rest>.*)$")


def errors() -> list[str]:
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode not in (0, 1) or "error: " not in r.stdout and r.returncode:
        sys.exit(f"mypy did not run (exit {r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return sorted(f"{m['file']}: {m['rest']}" for line in r.stdout.splitlines() if (m := _ERROR.match(line)))


def main(argv: list[str]) -> int:
    now = errors()
    if "--update" in argv:
        BASELINE.write_text("".join(f"{e}\n" for e in now))
        print(f"mypy: {len(now)} error(s) written to {BASELINE.relative_to(ROOT)}")
        return 0
    known = Counter(BASELINE.read_text().splitlines()) if BASELINE.is_file() else Counter()
    new = Counter(now) - known
    gone = known - Counter(now)
    for e in sorted(new.elements()):
        print(f"new: {e}")
    if gone:
        print(f"mypy: {sum(gone.values())} baseline error(s) fixed: run `python tools/mypy_baseline.py --update`")
    print(f"mypy: {len(now)} error(s), {sum(new.values())} not in the baseline")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
