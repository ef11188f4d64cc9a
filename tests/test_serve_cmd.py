"""The exact serve command: flags for new vLLM, environment variables for old, nothing silently dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.matrix.load import load_matrix
from harness.matrix.plan import expand
from harness.serve.command import build, env_for_kernels

ROOT = Path(__file__).resolve().parent.parent


def cells_of(path: Path) -> dict:
    m = load_matrix(path)
    return {c.id: c for c in expand(m)}, m


def test_flags_form_for_the_h200_matrix():
    cells, m = cells_of(ROOT / "matrix" / "h200-local.toml")
    cmd = build(cells["vllm-0251/qwen3moe-nvfp4/moe=marlin"], m.spec.serve, matrix_dir=m.path.parent, port=8123)
    args = list(cmd.args)
    assert args[:2] == ["serve", "/tmp/models/qwen3moe_nvfp4"]
    assert args[args.index("--moe-backend") + 1] == "marlin"
    assert args[args.index("--load-format") + 1] == "dummy"
    assert args[args.index("--port") + 1] == "8123"
    assert "--linear-backend" not in args
    fp8 = build(cells["vllm-0251/qwen3moe-fp8/auto"], m.spec.serve, matrix_dir=m.path.parent, port=1)
    assert fp8.args[fp8.args.index("--quantization") + 1] == "fp8"


def test_config_args_come_after_model_args_so_the_lever_wins():
    # a serving lever such as `--kv-cache-dtype auto` must override the model's `fp8`
    cells, m = cells_of(ROOT / "matrix" / "rtx-pro-6000.toml")
    args = list(build(cells["rtx-120a/nemotron-nvfp4/lever=kv-auto"], m.spec.serve,
                      matrix_dir=m.path.parent, port=1).args)
    where = [i for i, a in enumerate(args) if a == "--kv-cache-dtype"]
    assert [args[i + 1] for i in where] == ["fp8", "auto"]


def test_cudagraph_mode_goes_through_compilation_config():
    cells, m = cells_of(ROOT / "matrix" / "spark.toml")
    args = list(build(cells["spark-121a/qwen36-nvfp4/full-graphs"], m.spec.serve,
                      matrix_dir=m.path.parent, port=1).args)
    assert json.loads(args[args.index("--compilation-config") + 1]) == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    assert args[args.index("--attention-backend") + 1] == "FLASH_ATTN"


@pytest.mark.parametrize(
    ("quant", "moe", "linear", "env"),
    [
        ("nvfp4", "flashinfer_cutlass", None,
         {"VLLM_USE_FLASHINFER_MOE_FP4": "1", "VLLM_FLASHINFER_MOE_BACKEND": "throughput"}),
        ("nvfp4", "flashinfer_trtllm", None,
         {"VLLM_USE_FLASHINFER_MOE_FP4": "1", "VLLM_FLASHINFER_MOE_BACKEND": "latency"}),
        ("fp8", "flashinfer_cutlass", None,
         {"VLLM_USE_FLASHINFER_MOE_FP8": "1", "VLLM_FLASHINFER_MOE_BACKEND": "throughput"}),
        ("nvfp4", "cutlass", None, {"VLLM_USE_FLASHINFER_MOE_FP4": "0"}),
        ("fp8", "marlin", None, {"VLLM_TEST_FORCE_FP8_MARLIN": "1"}),
        ("nvfp4", None, "flashinfer_cudnn", {"VLLM_NVFP4_GEMM_BACKEND": "flashinfer-cudnn"}),
        ("nvfp4", "auto", None, {}),
    ],
)
def test_env_form_for_older_vllm(quant, moe, linear, env):
    assert env_for_kernels(quant, moe, linear) == env


@pytest.mark.parametrize(("quant", "moe", "linear"), [
    ("nvfp4", "marlin", None),        # no env var forces NVFP4 Marlin on a chip with FP4
    ("nvfp4", "flashinfer_b12x", None),
    ("nvfp4", None, "flashinfer_b12x"),
    ("fp8", None, "cutlass"),         # VLLM_NVFP4_GEMM_BACKEND is NVFP4 only
])
def test_env_form_refuses_what_it_cannot_express(quant, moe, linear):
    with pytest.raises(ConfigError, match="kernel_selection"):
        env_for_kernels(quant, moe, linear)


def test_a_checkpoint_that_became_a_system_folder_is_refused_at_serve_time(tmp_path, root):
    # loaded while it was a plain folder, swapped for a link to /etc before the cell starts
    from harness.serve.command import model_path

    m = load_matrix(root / "matrix" / "h200-local.toml")
    cell = expand(m)[0]
    link = tmp_path / "ckpt"
    link.symlink_to("/etc")
    moved = cell.model.model_copy(update={"checkpoint": str(link)})
    from dataclasses import replace

    with pytest.raises(ConfigError, match="system folder /etc"):
        model_path(replace(cell, model=moved), tmp_path)
    (tmp_path / "real").mkdir()
    ok = cell.model.model_copy(update={"checkpoint": "./real"})
    assert model_path(replace(cell, model=ok), tmp_path) == str(tmp_path / "real")


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_port_out_of_range_is_refused(root, port):
    m = load_matrix(root / "matrix" / "h200-local.toml")
    with pytest.raises(ConfigError, match="not a TCP port"):
        build(expand(m)[0], m.spec.serve, matrix_dir=m.path.parent, port=port)


def test_model_cache_is_checked_before_mounting(tmp_path):
    from harness.matrix.model import Serve
    from harness.serve.command import model_cache

    assert model_cache(Serve()) is None
    assert model_cache(Serve(model_cache=str(tmp_path))) == str(tmp_path)
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        model_cache(Serve(model_cache=str(tmp_path / "f")))
    (tmp_path / "l").symlink_to("/proc")
    with pytest.raises(ConfigError, match="system folder /proc"):
        model_cache(Serve(model_cache=str(tmp_path / "l")))


def test_every_weight_format_says_its_flashinfer_moe_variable():
    from typing import get_args

    from harness.matrix.model import Quantization
    from harness.serve.command import MOE_USE_VAR

    assert set(MOE_USE_VAR) == set(get_args(Quantization))
    with pytest.raises(ConfigError, match="for bf16 cannot be asked for"):
        env_for_kernels("bf16", "flashinfer_cutlass", None)  # bf16 has no such variable
