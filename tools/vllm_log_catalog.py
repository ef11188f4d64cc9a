"""Refresh tests/fixtures/upstream/: the log messages of every vLLM and FlashInfer release, read
from their PyPI sdists with `ast` (harness/fingerprint/upstream.py).

For each minor release from the floor (vLLM 0.8, FlashInfer 0.2) to the newest on PyPI, the
newest final patch that has an sdist is downloaded (checked against PyPI's sha256, cached in
$HARNESS_CACHE_DIR or ~/.cache/vllm-bw-harness/sdist), every .py file of the package is parsed,
and the messages the relevance rule keeps are written to `<project>-<version>.json` with the
counts of what it dropped. tests/test_fingerprint_upstream.py reads those files offline.

The C++ and CUDA sources of the same sdists (vLLM `csrc/`, FlashInfer `csrc/` and `include/`)
are read too (harness/fingerprint/upstream_cpp.py: every TORCH_CHECK*, FLASHINFER_CHECK/ERROR,
TLLM_CHECK*/THROW, TVM_FFI_THROW/CHECK*, `throw`, printf/fprintf message), and every message of
every release goes to `cpp/<project>.json`, once per distinct message with the first and last
release it is in. tests/test_fingerprint_upstream_cpp.py reads those offline.

usage: python tools/vllm_log_catalog.py [--only vllm|flashinfer-python] [--versions 0.23.0 ...]
                                         [--sources python|cpp|both] [--out tests/fixtures/upstream]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import urllib.parse
from collections import Counter
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness import http
from harness.errors import EnvironmentProblem, HarnessError
from harness.fingerprint.upstream import Message, category, extract
from harness.fingerprint.upstream_cpp import SOURCE_SUFFIXES
from harness.fingerprint.upstream_cpp import extract as extract_cpp

ROOT = Path(__file__).resolve().parent.parent
PYPI = "https://pypi.org/pypi"
OUT = ROOT / "tests" / "fixtures" / "upstream"
CACHE = Path(os.environ.get("HARNESS_CACHE_DIR")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm-bw-harness") / "sdist"
# project -> (package folder inside the sdist, oldest minor scanned)
PROJECTS = {"vllm": ("vllm", Version("0.8")), "flashinfer-python": ("flashinfer", Version("0.2"))}
# project -> the sdist's C++/CUDA trees (third-party trees such as 3rdparty/cutlass are not read:
# their status strings are in harness/data/signatures.toml cutlass-status-error)
CPP_TREES = {"vllm": ("csrc",), "flashinfer-python": ("csrc", "include")}
# FlashInfer: the autotuner's messages, and refusals anywhere in the package.
FI_AUTOTUNER = ("autotuner",)
FI_REFUSAL = ("unsupported", "not supported")


def releases(project: str) -> list[tuple[str, dict]]:
    """(version, sdist file record) of the newest final patch of each minor since the floor."""
    index = f"{PYPI}/{project}/json"
    data = http.get_json(index, max_bytes=64 << 20)
    best: dict[tuple[int, int], tuple[Version, dict]] = {}
    floor = PROJECTS[project][1]
    for text, files in data["releases"].items():  # type: ignore[index]
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease or v < floor:
            continue
        sdists = [f for f in files if f["packagetype"] == "sdist" and not f.get("yanked")]
        for f in sdists:  # a mirror may answer with relative links
            f["url"] = urllib.parse.urljoin(index, f["url"])
        if sdists and ((v.major, v.minor) not in best or v > best[v.major, v.minor][0]):
            best[v.major, v.minor] = (v, sdists[0])
    return [(str(v), f) for v, f in (best[k] for k in sorted(best))]


def fetch(record: dict, cache: Path | None = None) -> Path:
    cache = cache or CACHE
    cache.mkdir(parents=True, exist_ok=True)
    dest = cache / record["filename"]
    want = record["digests"]["sha256"]
    if not dest.exists() or _sha256(dest) != want:
        print(f"downloading {record['url']}", file=sys.stderr)
        http.download(record["url"], dest)
        if _sha256(dest) != want:
            dest.unlink()
            raise EnvironmentProblem(f"{record['filename']}: the download's sha256 differs from PyPI's {want}",
                                     hint="run the command again (a proxy may have cut the transfer)")
    return dest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _keep(project: str, msg: Message) -> str | None:
    if project == "vllm":
        return category(msg)
    text = msg.literal.lower()
    if any(k in msg.path for k in FI_AUTOTUNER) and msg.level != "RAISE":
        return "autotuner"
    if any(k in text for k in FI_REFUSAL):
        return "refusal"
    return None


def scan(project: str, tarball: Path) -> tuple[dict, list[dict]]:
    package = PROJECTS[project][0]
    counts: Counter[str] = Counter()
    kept: list[dict] = []
    dropped_levels: Counter[str] = Counter()
    kept_categories: Counter[str] = Counter()
    with tarfile.open(tarball) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) < 3 or parts[1] != package or not member.name.endswith(".py"):
                continue
            path = "/".join(parts[1:])
            counts["files"] += 1
            raw = tar.extractfile(member).read()  # type: ignore[union-attr]
            try:
                messages = extract(raw.decode("utf-8"), path)
            except (SyntaxError, UnicodeDecodeError, ValueError):
                counts["unparsed_files"] += 1
                continue
            for m in messages:
                counts["raises" if m.level == "RAISE" else "logger_calls"] += 1
                cat = _keep(project, m)
                if cat is None:
                    if m.level != "RAISE":
                        dropped_levels[m.level] += 1
                    continue
                counts["unresolved_kept"] += not m.resolved
                kept_categories[cat] += 1
                kept.append({"category": cat, "level": m.level, "template": m.template,
                             "fields": list(m.fields), "at": f"{m.path}:{m.line}", "call": m.call})
    summary = dict(counts)
    summary["kept"] = len(kept)
    summary["kept_by_category"] = dict(sorted(kept_categories.items()))
    summary["dropped_logger_calls_by_level"] = dict(sorted(dropped_levels.items()))
    summary["dropped_logger_calls"] = sum(dropped_levels.values())
    return summary, kept


def scan_cpp(project: str, tarball: Path) -> tuple[dict, list[dict]]:
    """Every raised or printed message of the release's C++/CUDA trees, and the counts."""
    trees = CPP_TREES[project]
    counts: Counter[str] = Counter()
    found: list[dict] = []
    with tarfile.open(tarball) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) < 3 or parts[1] not in trees:
                continue
            if not member.name.endswith(SOURCE_SUFFIXES):
                continue
            path = "/".join(parts[1:])
            counts["files"] += 1
            raw = tar.extractfile(member).read()  # type: ignore[union-attr]
            for m in extract_cpp(raw.decode("utf-8", errors="replace"), path):
                counts[m.kind] += 1
                counts[f"call:{m.call}"] += 1
                found.append({"kind": m.kind, "exception": m.exception, "template": m.template,
                              "fields": [f"s:{f}" for f in m.fields], "call": m.call,
                              "at": f"{m.path}:{m.line}"})
    return dict(sorted(counts.items())), found


def write_cpp(project: str, releases: dict[str, tuple[dict, dict, list[dict]]], out: Path) -> Path:
    """cpp/<project>.json: per release its sdist and counts; each distinct message once, with the
    first release and place it was seen and the last release it is in."""
    out = out / "cpp"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{project}.json"
    order = sorted(releases, key=Version)
    merged: dict[tuple, dict] = {}
    for version in order:
        for m in releases[version][2]:
            key = (m["kind"], m["exception"], m["template"], tuple(m["fields"]))
            if key not in merged:
                merged[key] = {**m, "at": f"{version} {m['at']}", "first": version, "last": version}
            merged[key]["last"] = version
    head = {"project": project, "trees": list(CPP_TREES[project]),
            "rule": "harness/fingerprint/upstream_cpp.py extract()",
            "releases": {v: {"sdist": releases[v][0]["filename"], "sha256": releases[v][0]["digests"]["sha256"],
                             "counts": releases[v][1]} for v in order},
            "distinct": len(merged)}
    lines = [json.dumps(head)[:-1] + ', "messages": [']
    rows = sorted(merged.values(), key=lambda m: (m["kind"], m["template"]))
    lines += [json.dumps(m, ensure_ascii=False) + ("," if i < len(rows) - 1 else "") for i, m in enumerate(rows)]
    lines.append("]}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write(project: str, version: str, record: dict, summary: dict, kept: list[dict], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{project}-{version}.json"
    head = {"project": project, "version": version, "sdist": record["filename"],
            "sha256": record["digests"]["sha256"], "source": f"https://pypi.org/project/{project}/{version}/",
            "rule": "harness/fingerprint/upstream.py category() (vllm); tools/vllm_log_catalog.py _keep() (flashinfer)",
            "counts": summary}
    lines = [json.dumps(head, sort_keys=False)[:-1] + ', "messages": [']
    lines += [json.dumps(k, ensure_ascii=False) + ("," if i < len(kept) - 1 else "") for i, k in enumerate(kept)]
    lines.append("]}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except HarnessError as exc:  # a network or PyPI failure: one line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=sorted(PROJECTS))
    ap.add_argument("--versions", nargs="*", help="only these versions (default: every minor)")
    ap.add_argument("--sources", choices=("python", "cpp", "both"), default=None,
                    help="which sources to read (default both; python with --versions)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.versions and args.sources in ("cpp", "both"):
        ap.error("--versions reads part of the releases, and cpp/<project>.json holds every release: "
                 "refresh the C++ catalog without --versions")
    args.sources = args.sources or ("python" if args.versions else "both")
    for project in [args.only] if args.only else list(PROJECTS):
        cpp: dict[str, tuple[dict, dict, list[dict]]] = {}
        for version, record in releases(project):
            if args.versions and version not in args.versions:
                continue
            tarball = fetch(record)
            if args.sources in ("python", "both"):
                summary, kept = scan(project, tarball)
                path = write(project, version, record, summary, kept, args.out)
                print(f"{project} {version}: {summary['kept']} kept of {summary.get('logger_calls', 0)} "
                      f"logger calls + {summary.get('raises', 0)} raises -> {path}")
            if args.sources in ("cpp", "both"):
                counts, found = scan_cpp(project, tarball)
                cpp[version] = (record, counts, found)
                print(f"{project} {version}: {len(found)} C++ messages in {counts.get('files', 0)} files")
        if cpp:
            print(f"{project}: -> {write_cpp(project, cpp, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
