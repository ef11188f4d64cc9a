"""examples/upstream-reports/: each committed report is what `harness bug` writes from the
committed evidence (the commands of its README, run again, give the same bytes), and the notes
and records it reads are checked at the boundary. The FA3 patch: it applies to the real vLLM
0.25.1 and 0.33.0 sdists, and the decision the patched setup.py makes, run from the patched file."""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bisect.store import BisectSpec
from harness.bisect.upstream_report import bisect_command
from harness.image.sources import Source

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "examples" / "upstream-reports"
FA3_PATCH = ROOT / "patches" / "vllm" / "fa3-only-when-asked.patch"
SDISTS = {"0.25.1": "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4",
          "0.33.0": "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"}


def _readme_commands() -> list[list[str]]:
    text = (REPORTS / "README.md").read_text()
    block = text.split("## Regenerate", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.startswith("harness bug ")]


def _harness(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def _said(res: subprocess.CompletedProcess) -> str:
    return " ".join(res.stderr.split())  # the console wraps long lines


def test_the_readme_names_a_command_for_every_committed_report():
    outs = {argv[argv.index("--out") + 1] for argv in _readme_commands()}
    committed = {str(p.relative_to(ROOT)) for p in REPORTS.glob("*.md") if p.name != "README.md"}
    assert outs == committed and len(outs) == 3


@pytest.mark.parametrize("argv", _readme_commands(), ids=lambda a: Path(a[a.index("--out") + 1]).stem)
def test_each_committed_report_regenerates_identically_from_its_evidence(argv, tmp_path):
    out = argv.index("--out") + 1
    committed = ROOT / argv[out]
    argv = [*argv[2:out], str(tmp_path / "report.md"), *argv[out + 1:]]
    res = _harness("bug", *argv)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "report.md").read_text() == committed.read_text()


def test_the_reports_carry_the_sections_a_maintainer_asks_for():
    for report in REPORTS.glob("*.md"):
        if report.name == "README.md":
            continue
        text = report.read_text()
        heads = re.findall(r"^## (.+)$", text, re.M)
        assert heads[:3] == ["Environment", "What was asked", "What was built"], report.name
        for head in ("Evidence", "Reproduce", "Known upstream", "Suggested fix"):
            assert head in heads, (report.name, head)
        assert re.search(r"^- [\w-]+/[\w-]+#\d+ \((issue|pull request), (open|closed|merged)\)", text, re.M)
        # no absolute path of the machine that ran it (a CMake path like `prefix/tmp/x` is fine)
        assert not re.search(r"(?<![\w.-])/(work|tmp|root|home|opt)/", text), report.name


def test_the_sm12x_report_names_the_first_bad_release_from_the_bisect():
    text = (REPORTS / "sm12x-12.1a-built-as-12.0f.md").read_text()
    assert "First bad: **0.20.0** (2026-04-27): `nvfp4_sm12x` 12.0f; `scaled_mm_sm120` 12.0f; `moe_data` 12.0f." in text
    assert "Last good: **0.19.1**" in text
    assert "-- CUDA supported target architectures: 12.0" in text
    assert ("harness bisect pypi:vllm --good 0.19.1 --bad 0.33.0 --probe configure --arch-list 12.1a "
            "--python $VENV/bin/python") in text


def test_the_fa3_report_rows_come_from_the_records():
    text = (REPORTS / "fa3-without-fa3-archs.md").read_text()
    stock = json.loads((REPORTS / "fa3-without-fa3-archs" / "0.25.1-stock" / "record.json").read_text())
    assert stock["decisions"]["FA3_ARCHS"] == "" and stock["fa3"]["cuda_objects"] == 192
    assert stock["fa3"]["arch_flags_of_one_object"] == [] and stock["fa3"]["asked_by_setup_py"] is True
    row = f"| 0.25.1 | none | `12.1a` | ok | (empty) | {stock['cuda_objects_total']} | 192 |"
    assert row in text
    assert "| 0.25.1 | `fa3-only-when-asked.patch` | `12.1a` | ok | (empty) |" in text


def _notes(tmp_path: Path, **extra) -> Path:
    body = {"title": "t", "tracker": "vllm", "asked": "a", "known": "no", "known_why": "w", "suggested_fix": "f",
            **extra}
    path = tmp_path / "notes.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in body.items()))
    return path


def test_a_notes_file_with_an_unknown_key_is_refused_naming_the_file_and_the_key(tmp_path):
    res = _harness("bug", "--bisect", "examples/bisect-sm121a/run-3", "--notes", str(_notes(tmp_path, titel="x")))
    said = _said(res)
    assert res.returncode == 2 and "Traceback" not in said
    assert "notes.toml: titel: Extra inputs are not permitted" in said and "suggested_fix" in said


def test_an_unknown_tracker_and_a_missing_evidence_file_are_refused(tmp_path):
    res = _harness("bug", "--bisect", "examples/bisect-sm121a/run-3", "--notes", str(_notes(tmp_path, tracker="x")))
    assert res.returncode == 2 and "tracker: 'x' is not a known tracker" in _said(res)
    res = _harness("bug", "--bisect", "examples/bisect-sm121a/run-3",
                   "--notes", str(_notes(tmp_path, evidence=["no/such/file.md"])))
    assert res.returncode == 2 and "'no/such/file.md' is not a file" in _said(res)


def test_a_build_report_needs_notes_and_one_kind_of_evidence(tmp_path):
    notes = str(_notes(tmp_path))
    res = _harness("bug", "--bisect", "examples/bisect-sm121a/run-3")
    assert res.returncode == 2 and "need --notes FILE" in _said(res)
    rec = "examples/upstream-reports/fa3-without-fa3-archs/0.25.1-stock/record.json"
    res = _harness("bug", "--bisect", "examples/bisect-sm121a/run-3", "--configure", rec, "--notes", notes)
    assert res.returncode == 2 and "make different reports" in _said(res)
    res = _harness("bug", "--configure", "examples/bisect-sm121a/run-3/result.json", "--notes", notes)
    assert res.returncode == 2 and "not a configure record" in _said(res)
    res = _harness("bug", "--bisect", str(tmp_path), "--notes", notes)
    assert res.returncode == 2 and "no result.json there" in _said(res)
    res = _harness("bug")
    assert res.returncode == 2 and "give RUN_DIR and CELL_ID" in _said(res)


def test_the_command_that_runs_a_bisect_again_keeps_every_choice():
    releases = {"history": {"kind": "releases", "project": "vllm", "good": "0.10.0", "bad": "0.33.0",
                            "index": "https://pypi.org/pypi/{name}/json", "minor_first": False},
                "probe": {"probe": "command", "command": ["sh", "-c", "git apply --check p.patch && exit 1; exit 0"]},
                "setup": {"patches": []}}
    assert bisect_command(BisectSpec.model_validate(releases)) == ("harness bisect pypi:vllm --good 0.10.0 --bad 0.33.0 --all-releases "
                                        "-- sh -c 'git apply --check p.patch && exit 1; exit 0'")
    git = {"history": {"kind": "git", "repo": "/src/vllm", "good": "a" * 40, "bad": "b" * 40},
           "probe": {"probe": "build", "matrix": "matrix/spark.toml", "stack": "spark-121a"}}
    assert bisect_command(BisectSpec.model_validate(git)) == (f"harness bisect /src/vllm --good {'a' * 40} --bad {'b' * 40} "
                                   "--probe build -m matrix/spark.toml --stack spark-121a")


def _patched_setup(version: str, tmp_path: Path, pinned_sources) -> str:
    tree = pinned_sources.tree(Source("vllm", "pypi", "vllm", version, SDISTS[version]))
    work = tmp_path / version
    work.mkdir()
    (work / "setup.py").write_bytes((tree / "setup.py").read_bytes())
    res = subprocess.run(["git", "apply", "--verbose", str(FA3_PATCH)], cwd=work, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr
    return (work / "setup.py").read_text()


@pytest.mark.network
@pytest.mark.parametrize("version", sorted(SDISTS))
def test_the_fa3_patch_applies_and_its_decision_runs_from_the_patched_setup_py(version, tmp_path, pinned_sources):
    text = _patched_setup(version, tmp_path, pinned_sources)
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "_fa3_arch_requested")
    scope: dict = {"re": re}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "setup.py", "exec"), scope)  # noqa: S102
    asked = scope["_fa3_arch_requested"]
    # no 9.0 entry: no FA3; a 9.0 entry in any spelling, no list, or a named arch: FA3 kept
    for arch_list in ("12.1a", "12.0a;12.1a", "12.0f 12.1f", "8.0;8.6;8.9+PTX", "10.0a,12.0"):
        assert asked(arch_list) is False, arch_list
    for arch_list in (None, "", "9.0", "9.0a;12.1a", "8.0 9.0+PTX", "Hopper", "12.1a;9.0a"):
        assert asked(arch_list) is True, arch_list
    # the one condition of the FA3 extension now holds the decision
    cond = re.search(r"if USE_PRECOMPILED_EXTENSIONS or \((.*?)\):\n\s+# FA3 requires", text, re.S)
    assert cond and "_fa3_arch_requested(os.environ.get(\"TORCH_CUDA_ARCH_LIST\"))" in cond.group(1)
