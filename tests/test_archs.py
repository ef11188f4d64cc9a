"""The one rule of where CUDA code runs (harness/archs.py), pinned by a table, and every caller of
it asked the same table: the scheduler, `harness plan` / `harness run`, the build-log check and
the audit of real nvcc 13.0 fatbins (tests/fixtures/archs/entries/, made by its make.sh).

The table is written out by hand from NVIDIA's CUDA Programming Guide (CUDA 13.x): 1.3.4.1 plain
SASS on later minors of the same major; 1.3.4.2 plain PTX JIT on any later cc; 5.1.2.1 `a` code on
its own cc only, PTX included; 5.1.2.2 with Table 28, `f` code on the family members listed there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.archs import CC, FAMILY, ArchEntry, ArchList, CudaArch, Load
from harness.audit.report import audit_path
from harness.audit.verdict import Target
from harness.cli import main
from harness.image.buildlog import check_build_log
from harness.matrix.load import load_matrix
from harness.matrix.plan import expand
from harness.run.schedule import arch_refusals, hosts_of, why_not

ENTRIES = Path(__file__).resolve().parent / "fixtures" / "archs" / "entries"
CHIPS = ("8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")

# N: native SASS loads; J: only PTX reaches the chip, by JIT; -: nothing runs there.
TABLE = """
entry      8.0 8.6 8.9 9.0 10.0 10.3 11.0 12.0 12.1
8.0         N   N   N   -   -    -    -    -    -
8.0+PTX     N   N   N   J   J    J    J    J    J
8.6         -   N   N   -   -    -    -    -    -
8.6+PTX     -   N   N   J   J    J    J    J    J
8.9         -   -   N   -   -    -    -    -    -
8.9+PTX     -   -   N   J   J    J    J    J    J
9.0         -   -   -   N   -    -    -    -    -
9.0+PTX     -   -   -   N   J    J    J    J    J
9.0a        -   -   -   N   -    -    -    -    -
9.0a+PTX    -   -   -   N   -    -    -    -    -
10.0        -   -   -   -   N    N    -    -    -
10.0+PTX    -   -   -   -   N    N    J    J    J
10.0a       -   -   -   -   N    -    -    -    -
10.0a+PTX   -   -   -   -   N    -    -    -    -
10.0f       -   -   -   -   N    N    -    -    -
10.0f+PTX   -   -   -   -   N    N    -    -    -
10.3        -   -   -   -   -    N    -    -    -
10.3+PTX    -   -   -   -   -    N    J    J    J
10.3a       -   -   -   -   -    N    -    -    -
10.3a+PTX   -   -   -   -   -    N    -    -    -
10.3f       -   -   -   -   -    N    -    -    -
10.3f+PTX   -   -   -   -   -    N    -    -    -
11.0        -   -   -   -   -    -    N    -    -
11.0+PTX    -   -   -   -   -    -    N    J    J
11.0a       -   -   -   -   -    -    N    -    -
11.0a+PTX   -   -   -   -   -    -    N    -    -
11.0f       -   -   -   -   -    -    N    -    -
11.0f+PTX   -   -   -   -   -    -    N    -    -
12.0        -   -   -   -   -    -    -    N    N
12.0+PTX    -   -   -   -   -    -    -    N    N
12.0a       -   -   -   -   -    -    -    N    -
12.0a+PTX   -   -   -   -   -    -    -    N    -
12.0f       -   -   -   -   -    -    -    N    N
12.0f+PTX   -   -   -   -   -    -    -    N    N
12.1        -   -   -   -   -    -    -    -    N
12.1+PTX    -   -   -   -   -    -    -    -    N
12.1a       -   -   -   -   -    -    -    -    N
12.1a+PTX   -   -   -   -   -    -    -    -    N
12.1f       -   -   -   -   -    -    -    -    N
12.1f+PTX   -   -   -   -   -    -    -    -    N
"""
_MARK = {"N": Load.NATIVE, "J": Load.JIT, "-": Load.NO}


def _table() -> dict[str, dict[str, Load]]:
    head, *rows = [line.split() for line in TABLE.strip().splitlines()]
    assert tuple(head[1:]) == CHIPS
    return {r[0]: dict(zip(CHIPS, (_MARK[m] for m in r[1:]), strict=True)) for r in rows}


EXPECTED = _table()
CASES = [(entry, chip, load) for entry, row in EXPECTED.items() for chip, load in row.items()]


def test_the_table_covers_every_suffix_with_and_without_ptx_on_every_chip():
    """Every valid (cc, suffix, +PTX) of the chips above is a row: none, a from 9.0, f from 10.0."""
    want = {f"{cc}{s}{p}" for cc in CHIPS for s in ("", "a", "f") for p in ("", "+PTX")
            if ArchEntry.parse(f"{cc}{s}").problem() is None}
    assert set(EXPECTED) == want
    assert len(CASES) == 40 * 9


@pytest.mark.parametrize(("entry", "chip", "load"), CASES)
def test_the_rule(entry, chip, load):
    assert ArchList.parse(entry).load_on(CC.parse(chip)) is load
    assert ArchList.parse(entry).runs_on(chip) is (load is not Load.NO)


@pytest.mark.parametrize(("name", "chip", "load"), [
    ("compute_90a", "9.0", Load.JIT), ("compute_90a", "12.1", Load.NO),  # a PTX: its own chip only
    ("compute_120f", "12.1", Load.JIT), ("compute_121f", "12.0", Load.NO),  # f PTX: Table 28
    ("compute_100f", "10.3", Load.JIT), ("compute_100f", "11.0", Load.NO),
    ("compute_80", "8.6", Load.JIT), ("compute_120", "9.0", Load.NO),  # plain PTX: any later cc
    ("sm_120f", "10.7", Load.NO), ("sm_100f", "10.7", Load.NATIVE),  # 10.7 is in Table 28's 10.0 family
    ("sm_80", "9.0", Load.NO),  # SASS never crosses a major
])
def test_single_targets_by_their_nvcc_names(name, chip, load):
    assert CudaArch.parse(name).load_on(CC.parse(chip)) is load


def test_family_table_is_same_major_at_a_higher_or_equal_minor_for_every_listed_target():
    """Table 28 happens to be arithmetic today; the table, not the arithmetic, is the rule."""
    for target, members in FAMILY.items():
        assert all(m.major == target.major and m >= target for m in members), target
        assert target in members


@pytest.mark.parametrize(("text", "problem"), [
    ("12.1x", "'12.1x' is not an arch"),
    ("", "empty arch list"),
    ("8.6a", "arch-specific 'a' targets exist from 9.0 on"),
    ("9.0f", "family 'f' targets exist from 10.0 on"),
    ("13.7", "compute capability 13.7 is unknown"),
])
def test_what_nvcc_refuses_is_named(text, problem):
    try:
        problems = ArchList.parse(text).problems()
    except ValueError as exc:
        problems = [str(exc)]
    assert any(problem in p for p in problems), problems


def test_the_list_keeps_its_text_and_reads_both_separators():
    archs = ArchList.parse(" 12.0f 12.1a;8.0+PTX ")
    assert str(archs) == "12.0f 12.1a;8.0+PTX"
    assert [str(e) for e in archs] == ["12.0f", "12.1a", "8.0+PTX"]
    assert [t.name for t in archs.targets] == ["sm_120f", "sm_121a", "sm_80", "compute_80"]
    assert archs.ccs == {CC(12, 0), CC(12, 1), CC(8, 0)}
    assert ArchList.read("7.5;8.0;garbage;12.0").ccs == {CC(7, 5), CC(8, 0), CC(12, 0)}


# --- every caller, asked the same table --------------------------------------------------------

STACK = """
[stacks.{name}]
torch_cuda_arch_list = "{entry}"
base_image = {{ repository = "nvidia/cuda", tag = "13.0.1-devel-ubuntu24.04" }}
torch = {{ version = "2.10.0" }}
vllm = {{ pypi = "0.33.0" }}
flashinfer = {{ version = "0.7.2.post1" }}
"""
TAIL = """
[models.qwen]
checkpoint = "Qwen/Qwen3-30B-A3B-FP8"
quantization = "fp8"
active_params_b = 3.3
bytes_per_param = 1.0

[configs.tp1]
"""


def _hw(chip: str) -> str:
    return "c" + chip.replace(".", "")


def _stack(entry: str) -> str:
    return "e" + entry.replace(".", "").replace("+PTX", "-ptx")


def _matrix_text(hardware: str, hosts: bool) -> str:
    text = f'[matrix]\nname = "archs"\nhardware = "{hardware}"\n'
    for chip in CHIPS:
        text += f'\n[hardware.{_hw(chip)}]\ncc = "{chip}"\nbandwidth_gbs = 100\nmemory_gib = 16\n'
        if hosts:
            text += f'\n[hosts.{_hw(chip)}]\nhardware = "{_hw(chip)}"\n'
    return text + "".join(STACK.format(name=_stack(e), entry=e) for e in EXPECTED) + TAIL


@pytest.fixture(scope="module")
def every_caller(tmp_path_factory) -> dict[str, dict[tuple[str, str], bool]]:
    """(entry, chip) -> does it run there, as each caller answers it."""
    root = tmp_path_factory.mktemp("archs")
    answers: dict[str, dict[tuple[str, str], bool]] = {
        "rule": {(e, c): load is not Load.NO for e, c, load in CASES}}

    # the scheduler: may a cell of the entry's stack go to a host with that chip?
    path = root / "hosts.toml"
    path.write_text(_matrix_text(_hw(CHIPS[0]), hosts=True))
    m = load_matrix(path)
    hosts = {h.cc: h for h in hosts_of(m)}
    cells = {c.stack_name: c for c in expand(m)}
    answers["scheduler"] = {(e, c): why_not(cells[_stack(e)], hosts[c], m) is None for e, c, _ in CASES}

    # `harness plan` and `harness run`: is the stack refused on a matrix of that hardware?
    answers["plan"] = {}
    for chip in CHIPS:
        path = root / f"plan-{_hw(chip)}.toml"
        path.write_text(_matrix_text(_hw(chip), hosts=False))
        m = load_matrix(path)
        refused = "\n".join(arch_refusals(expand(m), m))
        for e in EXPECTED:
            answers["plan"][(e, chip)] = f"stacks.{_stack(e)}.torch_cuda_arch_list" not in refused

    # the build-log check: vLLM printed the entry as its SM12x NVFP4 archs; a plain ask of the chip
    answers["build log"] = {}
    for e, c, _ in CASES:
        if c.startswith("12."):
            log = f"-- CUDA supported target architectures: 12.0\n-- Building SM12x NVFP4 for archs: {e}\n"
            answers["build log"][(e, c)] = check_build_log(log, ArchList.parse(c)) == []

    # the audit, of a real nvcc 13.0 fatbin built for the entry
    answers["audit"] = {}
    targets = [Target.from_cc(c) for c in CHIPS]
    for e in EXPECTED:
        report = audit_path(ENTRIES / f"{e}.fatbin", targets, jobs=1)
        for v in report.verdicts:
            answers["audit"][(e, v.target.cc)] = not any(ch.family == "files" for ch in v.checks)
    return answers


@pytest.mark.parametrize("caller", ["scheduler", "plan", "build log", "audit"])
def test_no_two_callers_disagree(every_caller, caller):
    got = every_caller[caller]
    assert got, caller
    rule = every_caller["rule"]
    wrong = sorted(f"{e} on {c}: rule {rule[(e, c)]}, {caller} {v}" for (e, c), v in got.items() if v != rule[(e, c)])
    assert not wrong, wrong
    if caller != "build log":
        assert len(got) == len(CASES)


def test_the_audit_reads_the_entries_targets_from_the_fatbins():
    """The fixtures hold what the entry builds: SASS, plus its PTX with +PTX (not a stand-in)."""
    for e in EXPECTED:
        report = audit_path(ENTRIES / f"{e}.fatbin", [Target.from_cc("12.1")], jobs=1)
        got = sorted(o.arch.name for f in report.files for o in f.objects)
        assert got == sorted(t.name for t in ArchList.parse(e).targets), e


def test_the_old_disagreements_are_gone():
    """What the three copies of the rule answered differently before there was one."""
    assert not ArchList.parse("9.0a+PTX").runs_on("12.1")  # the scheduler said yes
    log = "-- CUDA supported target architectures: 12.0\n-- Building SM12x NVFP4 for archs: 12.1f\n"
    assert [p.kind for p in check_build_log(log, ArchList.parse("12.0"))] == ["arch-missing"]  # said covered


# --- plan and run refuse a stack that cannot run on the matrix's hardware ----------------------

SPARK = """
[matrix]
name = "refuse"
hardware = "spark"

[hardware.spark]
cc = "12.1"
bandwidth_gbs = 273
memory_gib = 128
""" + STACK.format(name="hopper", entry="9.0a+PTX") + STACK.format(name="gb10", entry="12.1a") + TAIL


@pytest.mark.parametrize("argv", [["plan"], ["plan", "--json"], ["run", "--allow-unpinned"]])
def test_plan_and_run_refuse_a_stack_whose_archs_cannot_load_on_the_hardware(tmp_path, capsys, argv):
    path = tmp_path / "m.toml"
    path.write_text(SPARK)
    results = tmp_path / "results"
    extra = ["--results", str(results)] if argv[0] == "run" else []
    assert main([*argv, "-m", str(path), *extra]) == 2
    said = capsys.readouterr().err
    assert "stacks.hopper.torch_cuda_arch_list: '9.0a+PTX'" in said
    assert "spark (cc 12.1)" in said and "add '12.1a' or '12.1'" in said
    assert "gb10" not in said
    assert not results.exists()  # refused before anything was stored


def test_a_selection_without_the_stack_is_not_refused(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(SPARK)
    assert main(["plan", "-m", str(path), "-k", "gb10", "--list"]) == 0
    assert capsys.readouterr().out.split() == ["gb10/qwen/tp1"]
