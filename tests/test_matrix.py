"""The matrix file: valid files load, every kind of bad input names file, key and fix."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import MatrixError
from harness.matrix.load import load_matrix
from harness.matrix.plan import expand, group_by_stack

SHA = "0123456789abcdef0123456789abcdef01234567"

BASE = textwrap.dedent(f"""
    [matrix]
    name = "t"
    hardware = "gb10"
    patches_dir = "patches"

    [hardware.gb10]
    cc = "12.1"
    bandwidth_gbs = 273
    memory_gib = 128

    [stacks.s121a]
    torch_cuda_arch_list = "12.1a"
    base_image = {{ repository = "nvidia/cuda", tag = "13.0.1-devel-ubuntu24.04" }}
    torch = {{ version = "2.14.0" }}
    vllm = {{ git = "https://github.com/vllm-project/vllm", commit = "{SHA}", patches = ["vllm/0001-a.patch"] }}
    flashinfer = {{ version = "0.7.2.post1", prs = [{{ number = 2520, head_sha = "{SHA}", patch = "flashinfer/pr-2520.patch" }}] }}

    [stacks.local]
    runner = "local"
    local = {{ python = "/usr/bin/python3" }}

    [models.fp8]
    checkpoint = "Qwen/Qwen3-30B-A3B-FP8"
    quantization = "fp8"
    active_params_b = 3.3
    bytes_per_param = 1.0

    [models.nvfp4]
    checkpoint = "nvidia/Qwen3-30B-A3B-NVFP4"
    quantization = "nvfp4"
    active_params_b = 3.3
    bytes_per_param = 0.5625

    [configs.auto]

    [configs."moe=marlin,lin=auto"]
    moe_backend = "marlin"
""")


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "patches" / "vllm").mkdir(parents=True, exist_ok=True)
    (tmp_path / "patches" / "flashinfer").mkdir(parents=True, exist_ok=True)
    (tmp_path / "patches" / "vllm" / "0001-a.patch").write_text("--- a/x\n+++ b/x\n")
    (tmp_path / "patches" / "flashinfer" / "pr-2520.patch").write_text("--- a/y\n+++ b/y\n")
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(MatrixError) as info:
        load_matrix(write(tmp_path, text))
    assert info.value.path.endswith("m.toml")
    assert info.value.exit_code == 2
    for p in info.value.problems:  # every problem says how to fix it, pydantic's own included
        assert "\n      fix: " in p, p
    return info.value.problems


def test_valid_file_loads_and_expands(tmp_path):
    m = load_matrix(write(tmp_path, BASE))
    cells = expand(m)
    assert [c.id for c in cells] == [
        "s121a/fp8/auto", "s121a/fp8/moe=marlin,lin=auto",
        "s121a/nvfp4/auto", "s121a/nvfp4/moe=marlin,lin=auto",
        "local/fp8/auto", "local/fp8/moe=marlin,lin=auto",
        "local/nvfp4/auto", "local/nvfp4/moe=marlin,lin=auto",
    ]
    assert list(group_by_stack(cells)) == ["s121a", "local"]
    assert m.patch_path("vllm/0001-a.patch").is_file()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # unknown key: names the key path and lists the valid ones
        (lambda t: t.replace('[configs.auto]', '[configs.auto]\nmoe_backnd = "x"'),
         "configs.auto.moe_backnd: unknown key (valid keys here: description, moe_backend"),
        # wrong type
        (lambda t: t.replace("bandwidth_gbs = 273", 'bandwidth_gbs = "fast"'),
         "hardware.gb10.bandwidth_gbs: Input should be a valid number"),
        # patch path that does not exist, with its index in the series
        (lambda t: t.replace('patches = ["vllm/0001-a.patch"]', 'patches = ["vllm/0001-a.patch", "vllm/0002-missing.patch"]'),
         "stacks.s121a.vllm.patches[1]: patch file not found"),
        # a cell rule that names an unknown stack
        (lambda t: t + '\n[cells]\nstacks = ["s121a", "spark-999"]\n',
         "cells.stacks[1]: 'spark-999' names no stack (defined: s121a, local)"),
        (lambda t: t + '\n[cells]\nexclude = [{ stack = "nope" }]\n',
         "cells.exclude[0].stack: 'nope' names no stack"),
        # a commit that is not a full SHA
        (lambda t: t.replace(f'commit = "{SHA}"', 'commit = "4ba787ec9"'),
         "stacks.s121a.vllm: commit must be a full 40-character lowercase hex commit SHA, got '4ba787ec9'"),
        (lambda t: t.replace(f'head_sha = "{SHA}"', 'head_sha = "main"'),
         "stacks.s121a.flashinfer.prs[0].head_sha: head_sha must be a full 40-character"),
        # arch strings nvcc would not take
        (lambda t: t.replace('torch_cuda_arch_list = "12.1a"', 'torch_cuda_arch_list = "12.1x"'),
         "stacks.s121a.torch_cuda_arch_list: '12.1x' is not an arch"),
        (lambda t: t.replace('torch_cuda_arch_list = "12.1a"', 'torch_cuda_arch_list = "8.6a;13.7"'),
         "'8.6a': arch-specific 'a' targets exist from 9.0 on"),
        (lambda t: t.replace('torch_cuda_arch_list = "12.1a"', 'torch_cuda_arch_list = "12.0a;13.7"'),
         "'13.7': compute capability 13.7 is unknown"),
        # duplicates
        (lambda t: t.replace('quantization = "nvfp4"', 'quantization = "nvfp4"\nserved_name = "fp8"'),
         "models: served name 'fp8' is used by two models"),
        (lambda t: t.replace('patches = ["vllm/0001-a.patch"]', 'patches = ["vllm/0001-a.patch", "vllm/0001-a.patch"]'),
         "stacks.s121a.vllm.patches[1]: 'vllm/0001-a.patch' appears twice"),
        # a value outside its choices
        (lambda t: t.replace('quantization = "fp8"', 'quantization = "int4"'),
         "models.fp8.quantization: Input should be 'fp8', 'nvfp4' or 'bf16'"),
        (lambda t: t.replace('hardware = "gb10"\npatches_dir', 'hardware = "gb11"\npatches_dir'),
         "matrix.hardware: 'gb11' is not a hardware profile\n      fix: use one of: gb10"),
        (lambda t: t.replace("[configs.auto]", '[configs.auto]\ncudagraph_mode = "sometimes"'),
         "configs.auto.cudagraph_mode: 'sometimes' is not a CUDA-graph mode"),
        # a docker stack without its pins
        (lambda t: t.replace('torch = { version = "2.14.0" }\n', ""),
         "stacks.s121a: a docker stack needs torch"),
        (lambda t: t + '\n[[expect.select]]\ncells = "nvfp4 and (fp8"\nmoe_backend = "MARLIN"\n',
         "expect.select[0].cells: missing ')'"),
    ],
)
def test_bad_input_names_key_and_fix(tmp_path, edit, expected):
    found = problems(tmp_path, edit(BASE))
    assert any(expected in p for p in found), found


def test_malformed_toml_gives_line(tmp_path):
    found = problems(tmp_path, BASE.replace('name = "t"', 'name = "t'))
    assert len(found) == 1 and "not valid TOML" in found[0] and "line 3" in found[0]


def test_duplicate_table_is_a_toml_error_with_line(tmp_path):
    found = problems(tmp_path, BASE + '\n[configs.auto]\nmoe_backend = "marlin"\n')
    assert "not valid TOML" in found[0] and "line" in found[0]


def test_all_problems_reported_at_once(tmp_path):
    text = BASE.replace("bandwidth_gbs = 273", 'bandwidth_gbs = "x"').replace('quantization = "fp8"', 'quantization = "q"')
    assert len(problems(tmp_path, text)) == 2


def test_missing_file(tmp_path):
    with pytest.raises(MatrixError, match="cannot read the matrix file: missing"):
        load_matrix(tmp_path / "nope.toml")


def test_cli_exit_code_2_names_file_and_key(tmp_path, capsys):
    path = write(tmp_path, BASE.replace("[configs.auto]", "[configs.auto]\nbogus = 1"))
    assert main(["plan", "-m", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "configs.auto.bogus: unknown key" in err


@pytest.mark.parametrize(
    ("expr", "ids"),
    [
        ("nvfp4", ["s121a/nvfp4/auto", "s121a/nvfp4/moe=marlin,lin=auto",
                   "local/nvfp4/auto", "local/nvfp4/moe=marlin,lin=auto"]),
        ("NVFP4 and not marlin", ["s121a/nvfp4/auto", "local/nvfp4/auto"]),
        ("(local or s121a) and fp8 and auto", ["s121a/fp8/auto", "s121a/fp8/moe=marlin,lin=auto",
                                               "local/fp8/auto", "local/fp8/moe=marlin,lin=auto"]),
        ("s121a/fp8/auto", ["s121a/fp8/auto"]),
    ],
)
def test_k_expressions(tmp_path, expr, ids):
    assert [c.id for c in expand(load_matrix(write(tmp_path, BASE)), expr)] == ids


def test_exclude_and_only(tmp_path):
    text = BASE + '\n[cells]\nexclude = [{ model = "fp8", config = "moe=*" }]\nonly = [{ stack = "s121a" }]\n'
    assert [c.id for c in expand(load_matrix(write(tmp_path, text)))] == [
        "s121a/fp8/auto", "s121a/nvfp4/auto", "s121a/nvfp4/moe=marlin,lin=auto"]


def test_plan_json_lists_cells_with_images(tmp_path, capsys):
    path = write(tmp_path, BASE)
    assert main(["plan", "-m", str(path), "--json", "-k", "nvfp4"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["id"] for r in rows} == {"s121a/nvfp4/auto", "s121a/nvfp4/moe=marlin,lin=auto",
                                       "local/nvfp4/auto", "local/nvfp4/moe=marlin,lin=auto"}
    for r in rows:
        assert {"id", "stack", "model", "config", "image"} <= set(r)
    images = {r["stack"]: r["image"] for r in rows}
    assert images["local"] == "local:/usr/bin/python3"
    assert images["s121a"].startswith("vllm-bw:s121a-")


def test_image_tag_follows_patch_bytes(tmp_path, capsys):
    path = write(tmp_path, BASE)
    main(["plan", "-m", str(path), "--json"])
    before = json.loads(capsys.readouterr().out)[0]["image"]
    (tmp_path / "patches" / "vllm" / "0001-a.patch").write_text("--- a/x\n+++ b/x\n@@ changed\n")
    main(["plan", "-m", str(path), "--json"])
    after = json.loads(capsys.readouterr().out)[0]["image"]
    assert before != after


@pytest.mark.parametrize("name", ["spark.toml", "rtx-pro-6000.toml", "h200-local.toml"])
def test_shipped_matrices_load(root, name):
    m = load_matrix(root / "matrix" / name)
    cells = expand(m)
    assert cells, name
    assert len({c.id for c in cells}) == len(cells)


def test_rtx_matrix_encodes_the_seed_sweeps(root):
    m = load_matrix(root / "matrix" / "rtx-pro-6000.toml")
    configs = m.spec.configs
    # nine kernel couples; eleven serving levers
    assert sum(1 for n in configs if n.startswith(("moe=", "lin="))) == 9
    assert sum(1 for n in configs if n.startswith("lever=")) == 11
    assert configs["moe=flashinfer_b12x,lin=flashinfer_b12x"].linear_backend == "flashinfer_b12x"
    ids = [c.id for c in expand(m)]
    assert "rtx-120a/qwen3-fp8/auto" in ids and "rtx-120a/qwen3-fp8/lever=o3" not in ids


# --- which FP8 cell each NVFP4 cell is judged against (harness.matrix.pairs) -------------------

FAMILIES = BASE.replace('quantization = "fp8"\n', 'quantization = "fp8"\nfamily = "qwen3-30b"\n').replace(
    'quantization = "nvfp4"\n', 'quantization = "nvfp4"\nfamily = "qwen3-30b"\n')
OTHER_NVFP4 = """
[models.nemotron-nvfp4]
checkpoint = "nvidia/Nemotron-NVFP4"
quantization = "nvfp4"
active_params_b = 3.0
bytes_per_param = 0.5625
"""


def test_rtx_pro_6000_judges_nemotron_against_nothing(root, capsys):
    """The shipped case that was wrong: nemotron-nvfp4 was judged against qwen3-fp8 (same stack
    and config); the matrix's families pair qwen3 with qwen3 and nemotron with none."""
    path = root / "matrix" / "rtx-pro-6000.toml"
    assert main(["plan", "-m", str(path), "--json", "-k", "auto and not lever"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["rtx-120a/nemotron-nvfp4/auto"]["compare_with"] is None
    assert rows["rtx-120a/qwen3-nvfp4/auto"]["compare_with"] == "rtx-120a/qwen3-fp8/auto"
    assert "compare_with" not in rows["rtx-120a/qwen3-fp8/auto"]  # recorded on NVFP4 cells only
    assert main(["plan", "-m", str(path), "-k", "auto and not lever"]) == 0
    shown = capsys.readouterr().out
    assert "judged against" in shown and "rtx-120a/qwen3-fp8/auto" in shown


def test_pairs_need_a_family_same_stack_and_config(tmp_path):
    cells = {c.id: c.compare_with for c in expand(load_matrix(write(tmp_path, FAMILIES + OTHER_NVFP4)))}
    assert cells["s121a/nvfp4/auto"] == "s121a/fp8/auto"
    assert cells["local/nvfp4/moe=marlin,lin=auto"] == "local/fp8/moe=marlin,lin=auto"
    assert cells["s121a/nemotron-nvfp4/auto"] is None and cells["s121a/fp8/auto"] is None
    # no family, no compare_with: nothing is compared (names are not guessed at)
    assert all(c.compare_with is None for c in expand(load_matrix(write(tmp_path, BASE))))
    # a filtered run compares only what it runs
    assert {c.id: c.compare_with for c in expand(load_matrix(write(tmp_path, FAMILIES)), "nvfp4")} == {
        "s121a/nvfp4/auto": None, "s121a/nvfp4/moe=marlin,lin=auto": None,
        "local/nvfp4/auto": None, "local/nvfp4/moe=marlin,lin=auto": None}


def test_compare_with_names_the_fp8_model(tmp_path):
    text = BASE + OTHER_NVFP4 + 'compare_with = "fp8"\n'
    cells = {c.id: c.compare_with for c in expand(load_matrix(write(tmp_path, text)))}
    assert cells["s121a/nemotron-nvfp4/auto"] == "s121a/fp8/auto"


@pytest.mark.parametrize(("extra", "key", "words"), [
    (OTHER_NVFP4 + 'compare_with = "nope"\n', "models.nemotron-nvfp4.compare_with", "is not a model"),
    (OTHER_NVFP4 + 'compare_with = "nvfp4"\n', "models.nemotron-nvfp4.compare_with", "is a nvfp4 model"),
    (OTHER_NVFP4 + 'family = "other"\ncompare_with = "fp8"\n', "models.nemotron-nvfp4.compare_with",
     "is of family 'qwen3-30b'"),
    ('[models.fp8-b]\ncheckpoint = "Qwen/Other-FP8"\nquantization = "fp8"\nfamily = "qwen3-30b"\n'
     'active_params_b = 3.3\nbytes_per_param = 1.0\n', "models.nvfp4.family", "the pair is ambiguous"),
])
def test_bad_pairs_are_refused_at_load(tmp_path, extra, key, words):
    (p,) = problems(tmp_path, FAMILIES + extra)
    assert p.startswith(key) and words in p, p
