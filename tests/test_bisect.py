"""`harness bisect` over generated git repositories: a change planted at a known commit is found;
skips (exit 125, a patch that stops applying, a build that fails, a crashing probe) are skips
with their reason; an interrupted bisect resumes without judging any commit twice."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.bisect import probes
from harness.bisect.history import GitHistory, HistorySpec, Point
from harness.bisect.probes import CommandProbe, Observation, ProbeSpec
from harness.bisect.search import BAD, GOOD, SKIP, narrow, next_point
from harness.bisect.session import Bisect, Setup
from harness.bisect.store import BisectResult, BisectSpec, BisectStore

# the generic probe: 125 where the commit says "skip me", 1 where the planted change is
CHECK = ("sh", "-c", "test -f skipme && exit 125; grep -q bad state && exit 1; exit 0")


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_GLOBAL": "/dev/null"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def make_repo(root: Path, n: int, bad_from: int, skip: frozenset[int] = frozenset(),
              cmake_from: int | None = None) -> list[str]:
    """n commits, numbered 1..n; the change lands at `bad_from`. From `cmake_from` on, the line
    the test patch edits reads differently, so the patch no longer applies."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(1, n + 1):
        (repo / "state").write_text("bad\n" if i >= bad_from else "good\n")
        (repo / "counter").write_text(f"{i}\n")
        (repo / "CMakeLists.txt").write_text('set(FP4_ARCHS "12.0a")\n' if cmake_from is None or i < cmake_from
                                             else 'set(FP4_ARCHS "12.0f")\n')
        if i in skip:
            (repo / "skipme").write_text("")
        elif (repo / "skipme").exists():
            (repo / "skipme").unlink()
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
    return git(repo, "rev-list", "--reverse", "HEAD").splitlines()


class Quiet:
    def __init__(self) -> None:
        self.lines: list[tuple[int, int, str, str]] = []

    def start(self, step, about, point) -> None:
        pass

    def done(self, step, about, point, record) -> None:
        self.lines.append((step, about, point.id, record.verdict))


def bisect_in(tmp: Path, shas: list[str], probe, *, patches=(), display=None) -> tuple[BisectResult, Bisect]:
    hist = GitHistory(str(tmp / "repo"), shas[0], shas[-1])
    points = hist.points()
    store = BisectStore.create(tmp / "out", BisectSpec(history=hist.spec(), probe=probe.spec()),
                               points, hist.preferred(points))
    b = Bisect(store, hist, probe, Setup(tuple(patches)), display or Quiet())
    return b.run(), b


# --- the search itself --------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 5, 16, 33, 100])
def test_search_finds_every_planted_change_within_log2_steps(n):
    for first_bad in range(1, n):
        verdicts = {0: GOOD, n - 1: BAD}
        while (i := next_point(n, verdicts)) is not None:
            verdicts[i] = BAD if i >= first_bad else GOOD
        r = narrow(n, verdicts)
        assert (r.bad, r.good, r.skipped) == (first_bad, first_bad - 1, ())
        assert len(verdicts) - 2 <= math.ceil(math.log2(n - 1)) if n > 2 else len(verdicts) == 2


def test_search_leaves_skips_as_suspects_when_they_hide_the_change():
    n, first_bad = 10, 5
    verdicts = {0: GOOD, n - 1: BAD}
    while (i := next_point(n, verdicts)) is not None:
        verdicts[i] = SKIP if i in (3, 4) else BAD if i >= first_bad else GOOD
    r = narrow(n, verdicts)
    assert r.done and r.suspects == (3, 4, 5) and r.good == 2


def test_search_tries_preferred_points_while_any_is_in_range():
    n, preferred = 20, {4, 9, 14}
    verdicts = {0: GOOD, n - 1: BAD}
    order = []
    while (i := next_point(n, verdicts, preferred)) is not None:
        order.append(i)
        verdicts[i] = BAD if i >= 11 else GOOD
    assert order[:2] == [9, 14]  # the coarse pass: 9 good, 14 bad; then only 10..13 remain
    assert set(order[2:]) <= {10, 11, 12, 13} and narrow(n, verdicts).bad == 11


# --- generated repositories ---------------------------------------------------------------------

@pytest.mark.parametrize("n,bad_from", [(12, 7), (9, 2), (9, 9), (30, 17)])
def test_command_probe_finds_the_planted_commit(tmp_path, n, bad_from):
    shas = make_repo(tmp_path, n, bad_from)
    result, b = bisect_in(tmp_path, shas, CommandProbe(CHECK))
    assert result.first_bad.id == shas[bad_from - 1]
    assert result.first_bad.title == f"commit {bad_from}"
    assert result.last_good.id == shas[bad_from - 2] and result.last_good.verdict == GOOD
    assert len(b.steps) <= 2 + math.ceil(math.log2(n))
    on_disk = sorted(p.name for p in (tmp_path / "out" / "steps").glob("*.json"))
    assert len(on_disk) == len(b.steps)  # one JSON per judged commit
    step = json.loads(next((tmp_path / "out" / "steps").glob("*.json")).read_text())
    assert step["verdict"] in (GOOD, BAD) and step["reason"].startswith("exit ")


def test_exit_125_is_a_skip_and_git_semantics_for_other_codes(tmp_path):
    shas = make_repo(tmp_path, 12, 7, skip=frozenset({6}))
    result, b = bisect_in(tmp_path, shas, CommandProbe(CHECK))
    # commit 6 is skipped, so git's answer holds: the first bad one is 6 or 7
    assert result.first_bad is None
    assert [s.id for s in result.suspects] == [shas[5], shas[6]]
    skipped = [s for s in b.steps.values() if s.verdict == SKIP]
    assert skipped and "exit 125" in skipped[0].reason
    assert [probes.exit_verdict(c) for c in (0, 1, 2, 125, 126, 127, 128, -9)] == \
        [GOOD, BAD, BAD, SKIP, BAD, BAD, None, None]


def test_a_skip_away_from_the_change_does_not_blur_the_answer(tmp_path):
    shas = make_repo(tmp_path, 16, 12, skip=frozenset({8}))
    result, _ = bisect_in(tmp_path, shas, CommandProbe(CHECK))
    assert result.first_bad.id == shas[11]


def test_a_command_killed_by_a_signal_is_a_skip_with_its_reason(tmp_path):
    shas = make_repo(tmp_path, 8, 7)
    probe = CommandProbe(("sh", "-c", 'grep -qx 4 counter && kill -9 $$; grep -q bad state && exit 1; exit 0'))
    result, b = bisect_in(tmp_path, shas, probe)
    killed = [s for s in b.steps.values() if s.id == shas[3]]  # commit 4: the first middle point
    assert killed and killed[0].verdict == SKIP and "died (exit -9)" in killed[0].reason
    assert result.first_bad.id == shas[6]


class CrashingProbe:
    """A probe of this test that raises on one commit, as a broken probe would."""

    name, compares = "crashing", False

    def __init__(self, crash_on: str) -> None:
        self.crash_on = crash_on

    def spec(self) -> ProbeSpec:
        return ProbeSpec(probe=self.name)

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        if point.id == self.crash_on:
            raise RuntimeError("probe exploded")
        return Observation(BAD if "bad" in (tree / "state").read_text() else GOOD)


def test_a_probe_that_raises_is_a_skip_with_the_reason_and_the_traceback_in_its_log(tmp_path):
    shas = make_repo(tmp_path, 10, 6)
    result, b = bisect_in(tmp_path, shas, CrashingProbe(shas[4]))
    crashed = next(s for s in b.steps.values() if s.id == shas[4])
    assert crashed.verdict == SKIP and crashed.reason == "the probe crashed: RuntimeError: probe exploded"
    log = tmp_path / "out" / "logs" / f"{crashed.index:04d}-{shas[4][:12]}.log"
    assert "Traceback" in log.read_text()
    assert [s.id for s in result.suspects] == [shas[4], shas[5]]


def test_a_patch_that_stops_applying_skips_those_commits_with_the_reason(tmp_path):
    shas = make_repo(tmp_path, 12, 9, cmake_from=7)
    patch = tmp_path / "archs.patch"
    patch.write_text('--- a/CMakeLists.txt\n+++ b/CMakeLists.txt\n@@ -1 +1 @@\n-set(FP4_ARCHS "12.0a")\n+set(FP4_ARCHS "12.1a")\n')
    # the probe checks that it runs on the patched tree (exit 3 would say it did not)
    probe = CommandProbe(("sh", "-c", "grep -q 12.1a CMakeLists.txt || exit 3; " + CHECK[2]))
    result, b = bisect_in(tmp_path, shas, probe, patches=[("archs.patch", patch)])
    by_id = {s.id: s for s in b.steps.values()}
    assert by_id[shas[-1]].verdict == BAD and "as given by --bad" in by_id[shas[-1]].reason
    late = [by_id[s] for s in shas[6:-1] if s in by_id]
    assert late and all(s.verdict == SKIP for s in late)
    assert all("a patch does not apply: source: archs.patch: does NOT apply: CMakeLists.txt" in s.reason
               for s in late)
    assert not any("exit 3" in s.reason for s in by_id.values())
    # commits 7..9 cannot be judged: the answer is the range git would give
    assert result.first_bad is None and result.last_good.id == shas[5]
    assert [s.id for s in result.suspects][-1] == shas[-1]


class Interrupt(Quiet):
    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after

    def done(self, step, about, point, record) -> None:
        super().done(step, about, point, record)
        if step == self.after:
            raise KeyboardInterrupt


def test_resume_after_an_interruption_judges_no_commit_twice(tmp_path):
    shas = make_repo(tmp_path, 40, 23)
    seen = tmp_path / "seen"
    probe = CommandProbe(("sh", "-c", f'echo "$HARNESS_BISECT_POINT" >> {seen}; grep -q bad state && exit 1; exit 0'))
    with pytest.raises(KeyboardInterrupt):
        bisect_in(tmp_path, shas, probe, display=Interrupt(after=3))
    first = seen.read_text().split()
    assert len(first) == 3
    # resumed through the command line, as a user would: the folder's command is shown and
    # refused until the user names it again
    rc = cli.main(["bisect", "--resume", str(tmp_path / "out")])
    assert rc == 2 and len(seen.read_text().split()) == 3
    rc = cli.main(["bisect", "--resume", str(tmp_path / "out"), "--", *probe.argv])
    assert rc == 0
    every = seen.read_text().split()
    assert len(every) == len(set(every)), "a commit was judged twice"
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["first_bad"]["id"] == shas[22]
    assert {s["id"] for s in result["steps"]} == set(every)


def test_cli_generic_form_prints_markdown_and_writes_json(tmp_path, capsys):
    shas = make_repo(tmp_path, 10, 4)
    rc = cli.main(["bisect", str(tmp_path / "repo"), "--good", shas[0], "--bad", "main",
                   "--out", str(tmp_path / "out"), "--", *CHECK])
    out = capsys.readouterr()
    assert rc == 0
    assert f"First bad commit: **{shas[3]}** commit 4" in out.out
    assert "step  1/" in out.err and "Traceback" not in out.err
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["bad_side"]["verdict"] == BAD and result["last_good"]["id"] == shas[2]
    assert (tmp_path / "out" / "result.md").read_text().startswith("## Bisect: the first bad commit")


def test_cli_refuses_endpoints_that_do_not_disagree(tmp_path, capsys):
    shas = make_repo(tmp_path, 6, 3)
    rc = cli.main(["bisect", str(tmp_path / "repo"), "--good", shas[0], "--bad", shas[1],
                   "--out", str(tmp_path / "out"), "--", *CHECK])
    def err() -> str:  # the message is fitted to the terminal: compare it unfolded
        return " ".join(capsys.readouterr().err.split())

    said = err()
    assert rc == 2 and "was judged good: nothing to bisect" in said and "Traceback" not in said
    rc = cli.main(["bisect", str(tmp_path / "repo"), "--good", shas[3], "--bad", shas[1],
                   "--out", str(tmp_path / "out2"), "--", *CHECK])
    assert rc == 2 and "is not an ancestor of --bad" in err()
    rc = cli.main(["bisect", str(tmp_path / "nowhere"), "--good", "a", "--bad", "b", "--", "true"])
    assert rc == 2 and "no such folder, and not a git URL" in err()


# --- a comparing probe: the build probe through its adapter, with a stand-in builder -----------

STAND_IN_BUILDER = """
# A stand-in for `harness build --probe`, for tests only. Called as the real one is
# (-m MATRIX -k STACK/ --probe --log-dir DIR), it reads the commit the matrix pins, reads the
# arch list that commit's CMakeLists.txt asks for, and writes DIR/probe-STACK.json in the shape
# `harness build --probe` writes; a commit holding a file `broken` does not build (exit 1, no JSON).
import json, subprocess, sys, tomllib
from pathlib import Path
args = sys.argv[1:]
matrix = tomllib.loads(Path(args[args.index("-m") + 1]).read_text())
stack = args[args.index("-k") + 1].rstrip("/")
vllm = matrix["stacks"][stack]["vllm"]
show = lambda path: subprocess.run(["git", "-C", vllm["git"], "show", f"{vllm['commit']}:{path}"],
                                   capture_output=True, text=True)
if show("broken").returncode == 0:
    sys.exit("ninja: build stopped: subcommand failed.")
arch = show("CMakeLists.txt").stdout.split('"')[1]
sass = "pass: OMMA.SF present" if arch.endswith("a") else "fail: no sm_121a cubin"
row = {"family": "nvfp4_sm12x", "source": "csrc/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu",
       "stock": arch, "patched": arch, "archs": f"sm_{arch.replace('.', '')}=1", "fp4": True,
       "verdicts": [f"sm_121a: {sass}"]}
out = Path(args[args.index("--log-dir") + 1])
out.mkdir(parents=True, exist_ok=True)
(out / f"probe-{stack}.json").write_text(json.dumps({
    "stack": stack, "image_ref": "stand-in", "status": "pass" if arch.endswith("a") else "fail", "reason": "",
    "rows": [row], "timings": {}, "log_path": ""}))
"""


def _stand_in_builder(tmp_path: Path, monkeypatch, repo: Path) -> Path:
    script = tmp_path / "builder.py"
    script.write_text(STAND_IN_BUILDER)
    monkeypatch.setenv(probes.BUILD_PROBE_ENV, f"{sys.executable} {script}")
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(f'[stacks.s.vllm]\ngit = "{repo}"\ncommit = "{"0" * 40}"\npatches = []\n')
    return matrix


def test_build_probe_compares_with_the_good_endpoint_and_skips_failed_builds(tmp_path, monkeypatch):
    make_repo(tmp_path, 14, 99, cmake_from=9)  # the decision changes at commit 9
    repo = tmp_path / "repo"
    for title, touch in (("commit 15 (does not build)", "broken"), ("commit 16 (does not build)", "note")):
        (repo / touch).write_text("")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", title)
    (repo / "broken").unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "commit 17")
    shas = git(repo, "rev-list", "--reverse", "HEAD").splitlines()
    matrix = _stand_in_builder(tmp_path, monkeypatch, repo)
    source = HistorySpec(kind="git", repo=str(repo), good=shas[0], bad=shas[-1])
    result, b = bisect_in(tmp_path, shas, probes.BuildProbe(matrix, "s", source))
    assert result.first_bad.id == shas[8] and result.first_bad.title == "commit 9"
    assert result.reference == {"nvfp4_sm12x": "stock 12.0a; patched 12.0a; cubins sm_120a=1; audit sm_121a: pass",
                                   "probe": "pass"}
    assert result.bad_side.decision["nvfp4_sm12x"].endswith("audit sm_121a: fail")
    skipped = [s for s in b.steps.values() if s.verdict == SKIP]
    assert all("the probe build did not finish (exit 1): ninja: build stopped" in s.reason for s in skipped)
    assert all(s.id in shas[14:16] for s in skipped)
    assert not list(tmp_path.glob(".bisect-*"))  # the pinned matrix copies are removed


def test_the_answer_of_a_cmake_probe_names_the_commits_and_hunks_that_changed_the_arch_list(tmp_path, monkeypatch):
    from harness.bisect.cmakediff import explain
    from harness.bisect.report import markdown

    shas = make_repo(tmp_path, 10, 99, cmake_from=6)
    matrix = _stand_in_builder(tmp_path, monkeypatch, tmp_path / "repo")
    probe = probes.BuildProbe(matrix, "s", HistorySpec(kind="git", repo=str(tmp_path / "repo"), good=shas[0], bad=shas[-1]))
    result, b = bisect_in(tmp_path, shas, probe)
    result = explain(b.store, b.history, result)
    assert [c.title for c in result.cmake_commits] == ["commit 6"]
    assert result.cmake_diff.text.splitlines()[3:] == ['-set(FP4_ARCHS "12.0a")', '+set(FP4_ARCHS "12.0f")']
    assert (tmp_path / "out" / "cmake.diff").read_text() == result.cmake_diff.text
    md = markdown(result)
    assert "### What changed in the CMake" in md and f"- {shas[5][:12]}" in md


def test_the_cell_probe_pins_the_stack_to_the_point_in_a_copy_of_the_matrix(tmp_path, monkeypatch):
    import hashlib

    from harness.image import sources
    from harness.matrix.load import load_matrix

    # the sdist the bisect downloaded and checked: its sha256 becomes the copy's pin
    monkeypatch.setattr(sources, "SDIST_CACHE", tmp_path)
    (tmp_path / "vllm-0.32.0.tar.gz").write_bytes(b"an sdist")
    spark = Path(__file__).resolve().parent.parent / "matrix" / "spark.toml"
    original = load_matrix(spark).spec.stacks["spark-121a"].vllm
    sha = "0123456789abcdef0123456789abcdef01234567"
    for source, point, want, pinned in (
            (HistorySpec(kind="releases", project="vllm", good="0.31.0", bad="0.32.0"), Point("0.32.0", "vllm 0.32.0"),
             ("pypi", "0.32.0"), hashlib.sha256(b"an sdist").hexdigest()),
            (HistorySpec(kind="git", repo="https://github.com/vllm-project/vllm.git", good="0" * 40, bad=sha),
             Point(sha, "a commit"), ("commit", sha), None)):
        probe = probes.CellProbe(spark, "spark-121a/qwen36-nvfp4/auto", "spark-121a", source)
        copy = probe.matrix_for(point)
        try:
            vllm = load_matrix(copy).spec.stacks["spark-121a"].vllm
        finally:
            copy.unlink()
        assert getattr(vllm, want[0]) == want[1] and vllm.sdist_sha256 == pinned
        assert vllm.patches == original.patches  # the stack's patches still apply on top
    assert probes.CELL_VERDICT["pass"] == GOOD and probes.CELL_VERDICT["build-failed"] == SKIP


def test_ctrl_c_then_resume_through_the_command_line(tmp_path):
    import signal
    import sys
    import time

    shas = make_repo(tmp_path, 40, 29)
    seen = tmp_path / "seen"
    out = tmp_path / "out"
    command = f'echo "$HARNESS_BISECT_POINT" >> {seen}; sleep 0.5; grep -q bad state && exit 1; exit 0'
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           "HARNESS_CACHE_DIR": str(tmp_path / "cache")}  # the repository's mirror stays in the test's folder
    p = subprocess.Popen([sys.executable, "-m", "harness", "bisect", str(tmp_path / "repo"), "--good", shas[0],
                          "--bad", shas[-1], "--out", str(out), "--", "sh", "-c", command],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list((out / "steps").glob("*.json"))) < 3 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _o, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err
    judged = {json.loads(f.read_text())["id"] for f in (out / "steps").glob("*.json")}
    assert len(judged) >= 3
    before = len(seen.read_text().split())
    assert cli.main(["bisect", "--resume", str(out), "--", "sh", "-c", command]) == 0
    again = set(seen.read_text().split()[before:])
    assert not judged & again, "a judged commit was judged again"
    assert json.loads((out / "result.json").read_text())["first_bad"]["id"] == shas[28]


def test_configure_probe_without_a_cuda_torch_is_refused_before_anything_is_written(tmp_path, capsys):
    shas = make_repo(tmp_path, 4, 3)
    # this interpreter (the test environment's) has no CUDA build of torch
    rc = cli.main(["bisect", str(tmp_path / "repo"), "--good", shas[0], "--bad", shas[-1], "--probe", "configure",
                   "--arch-list", "12.1a", "--python", sys.executable, "--out", str(tmp_path / "out")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and "has no CUDA build of torch" in err and "fix: give --python" in err
    assert not (tmp_path / "out").exists()


def test_a_damaged_bisect_folder_is_bad_input_naming_the_file(tmp_path, capsys):
    shas = make_repo(tmp_path, 6, 4)
    args = ["bisect", str(tmp_path / "repo"), "--good", shas[0], "--bad", shas[-1], "--out", str(tmp_path / "out"),
            "--", *CHECK]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args) == 2  # the folder holds a bisect: resume it, never start over in it
    assert "holds a bisect already (resume it with --resume)" in " ".join(capsys.readouterr().err.split())
    step = next((tmp_path / "out" / "steps").glob("*.json"))
    step.write_text("{not json")
    assert cli.main(["bisect", "--resume", str(tmp_path / "out"), "--", *CHECK]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert step.name in said and "delete it to judge that point again" in said and "Traceback" not in said
    assert cli.main(["bisect", "--resume", str(tmp_path)]) == 2
    assert "no bisect.json: not a bisect folder" in " ".join(capsys.readouterr().err.split())
