"""The renderer on every docker stack of every shipped matrix: ARGs, patches, labels, hashes.
A render reads the build requirements from the pinned sdists (the `default_sources` fixture)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support.builds import one

from harness.errors import ConfigError
from harness.image.dockerfile import render
from harness.image.identity import image_ref
from harness.image.render import ARG_LINE, DEFAULT_TEMPLATE, PLACEHOLDER, context_tar, fill
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
DOCKER_STACKS = [
    (path.name, name)
    for path in sorted((ROOT / "matrix").glob("*.toml"))
    for name, stack in load_matrix(path).spec.stacks.items()
    # wheel stacks: tests/test_wheel_stack.py; offline stacks read the cache: tests/test_offline_sources.py
    if stack.runner == "docker" and stack.wheels is None and not stack.offline
]
REQUIRED_LABELS = (
    "harness.stack", "harness.content-hash", "harness.base-image", "harness.cuda", "harness.python",
    "harness.torch", "harness.torch-cuda-arch-list", "harness.flashinfer-cuda-arch-list",
    "harness.vllm.source", "harness.vllm.patches", "harness.flashinfer.source", "harness.flashinfer.version",
    "harness.flashinfer.commit", "harness.flashinfer.prs", "harness.max-jobs", "harness.nvcc-threads",
)


def test_every_shipped_matrix_has_a_docker_stack():
    assert {m for m, _ in DOCKER_STACKS} >= {"spark.toml", "rtx-pro-6000.toml"}


@pytest.mark.parametrize(("matrix_file", "stack"), DOCKER_STACKS)
def test_rendered_stack_is_complete(matrix_file, stack, default_sources):
    matrix = load_matrix(ROOT / "matrix" / matrix_file)
    r = render(one(matrix, stack))
    text = r.dockerfile
    assert not PLACEHOLDER.search(text)
    args = ARG_LINE.findall(text)
    # every ARG gets a build arg and every build arg has an ARG (the compile cache's store and
    # secret come at build time as an /etc/hosts entry of the steps, not as an ARG)
    assert set(args) == set(r.buildargs)
    for arg in args:
        uses = re.findall(rf"\$\{{{arg}\}}|\${arg}\b", text)
        assert uses, f"ARG {arg} is declared but never used"
    spec = matrix.spec.stacks[stack]
    expected = [p.path for p in spec.vllm.patches] + [pr.patch for pr in spec.flashinfer.prs]
    assert [p.rel for p in r.patches] == expected
    context = dict(r.files)
    positions = []
    for p in r.patches:
        assert f"COPY {p.context_path} " in text, f"{p.rel} is not COPY'd"
        assert context[p.context_path] == matrix.patch_path(p.rel).read_bytes()
        positions.append(text.index(f"git apply --verbose /opt/build/{p.context_path}"))
        assert r.labels[f"harness.{p.series}.patch.{Path(p.rel).name}.sha256"] == p.sha256
    assert positions == sorted(positions), "patches are applied in series order"
    for key in REQUIRED_LABELS:
        assert key in r.labels, key
    assert r.labels["harness.content-hash"] == r.content_hash
    assert r.labels["harness.torch-cuda-arch-list"] == str(spec.torch_cuda_arch_list)
    assert "fetch_source.py" in context
    assert r.image_ref == image_ref(one(matrix, stack))
    assert not re.search(r"^RUN\s+--mount", text, re.MULTILINE)  # the legacy builder would reject it
    assert "# syntax=" not in text  # BuildKit would pull a frontend image for it
    # the compile steps go through the compile cache; nothing of its store is an ARG (the legacy
    # builder writes ARG values into the image's history and the layer cache's key)
    assert 'eval "$(python /opt/build/compile_cache.py env)"' in text and "compile_cache.py" in context
    assert "COMPILE_CACHE" not in text and not any("COMPILE_CACHE" in k for k in r.buildargs)


def test_spark_121a_carries_the_cmake_patch_and_differs_from_stock(default_sources):
    matrix = load_matrix(ROOT / "matrix" / "spark.toml")
    stock, patched = render(one(matrix, "spark-stock")), render(one(matrix, "spark-121a"))
    assert patched.labels["harness.vllm.patches"] == "0001-cmake-sm121a-on-cuda13.patch"
    assert stock.content_hash != patched.content_hash


def test_hash_follows_patch_bytes_and_ignores_descriptions(tmp_path, default_sources):
    shutil.copytree(ROOT / "matrix", tmp_path / "matrix")
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    (tmp_path / ".git").mkdir()  # the copy is a repository: ../patches is inside it
    path = tmp_path / "matrix" / "spark.toml"
    before = render(one(load_matrix(path), "spark-121a")).content_hash
    path.write_text(path.read_text().replace("vLLM 0.33.0 with the local CMake patch", "Reworded"))
    assert render(one(load_matrix(path), "spark-121a")).content_hash == before
    patch = tmp_path / "patches" / "vllm" / "0001-cmake-sm121a-on-cuda13.patch"
    patch.write_bytes(patch.read_bytes() + b"\n")
    assert render(one(load_matrix(path), "spark-121a")).content_hash != before


def test_context_tar_is_reproducible(default_sources):
    matrix = load_matrix(ROOT / "matrix" / "spark.toml")
    assert context_tar(render(one(matrix, "spark-121a"))) == context_tar(render(one(matrix, "spark-121a")))


def test_unknown_placeholder_is_named():
    with pytest.raises(ConfigError, match="@TYPO@"):
        fill("FROM x\n@TYPO@\n", {"SYNTAX": ""}, "t")


def test_local_stack_has_no_image():
    matrix = load_matrix(ROOT / "matrix" / "h200-local.toml")
    name = next(iter(matrix.spec.stacks))
    with pytest.raises(ConfigError, match="no image"):
        render(one(matrix, name))


def test_template_is_the_shipped_one():
    assert DEFAULT_TEMPLATE.is_file()
