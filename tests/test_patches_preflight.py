"""Patch preflight on the REAL pinned sources: vLLM 0.33.0 and flashinfer-python 0.7.2.post1 sdists.

They come through the `pinned_sources` fixture (tests/conftest.py): from the suite's cache when
there (seconds), otherwise from PyPI (needs the network: ~100 MB, sha256-checked against the
pins in matrix/spark.toml).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.builds import one

from harness.image import sources
from harness.image.preflight import apply_series, parse_failure, preflight_stack
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
PATCHES = ROOT / "patches"
FIXTURE_PATCHES = Path(__file__).resolve().parent / "fixtures" / "build" / "patches"
CMAKE_PATCH = PATCHES / "vllm" / "0001-cmake-sm121a-on-cuda13.patch"


@pytest.fixture(scope="module")
def spark():
    return load_matrix(ROOT / "matrix" / "spark.toml")


@pytest.fixture(scope="module")
def vllm_tree(spark, pinned_sources):
    return pinned_sources.tree(sources.vllm_source(spark.spec.stacks["spark-121a"]))


@pytest.fixture(scope="module")
def flashinfer_tree(spark, pinned_sources):
    return pinned_sources.tree(sources.flashinfer_source(spark.spec.stacks["spark-121a"]))


@pytest.mark.network
def test_cmake_patch_applies_to_vllm_0330(vllm_tree):
    result = apply_series(vllm_tree, [(CMAKE_PATCH.name, CMAKE_PATCH)], project="vllm")
    assert result.ok, result.problems()
    assert result.patches[0].files == ("CMakeLists.txt",)


@pytest.mark.network
def test_patch_n_plus_1_is_checked_on_top_of_n(vllm_tree, tmp_path):
    # The same change twice: each applies alone, the second is stale on top of the first.
    again = tmp_path / "0002-same-change-again.patch"
    shutil.copy(CMAKE_PATCH, again)
    result = apply_series(vllm_tree, [(CMAKE_PATCH.name, CMAKE_PATCH), (again.name, again)], project="vllm")
    assert not result.ok
    first, second = result.patches
    assert first.ok and not second.ok
    assert second.name == "0002-same-change-again.patch"
    assert second.failed_file == "CMakeLists.txt" and second.failed_hunk_line is not None
    assert "0002-same-change-again.patch" in result.problems()[0]
    assert "CMakeLists.txt (hunk at line" in result.problems()[0]


@pytest.mark.network
def test_merged_flashinfer_pr_is_rejected_as_stale(flashinfer_tree):
    # PR #2520 is in 0.7.2.post1 already: its diff no longer applies, and the hunk is named.
    stale = FIXTURE_PATCHES / "flashinfer-pr2520-xqa-slice.patch"
    result = apply_series(flashinfer_tree, [(stale.name, stale)], project="flashinfer")
    assert not result.ok
    (p,) = result.patches
    assert p.name == stale.name
    assert (p.failed_file, p.failed_hunk_line) == ("flashinfer/jit/xqa.py", 54)
    assert p.describe() == ("flashinfer-pr2520-xqa-slice.patch: does NOT apply: flashinfer/jit/xqa.py "
                            "(hunk at line 54): patch does not apply (also failed: flashinfer/xqa.py:74)")


@pytest.mark.network
def test_pristine_tree_is_not_modified(vllm_tree):
    before = (vllm_tree / "CMakeLists.txt").read_bytes()
    apply_series(vllm_tree, [(CMAKE_PATCH.name, CMAKE_PATCH)])
    assert (vllm_tree / "CMakeLists.txt").read_bytes() == before


@pytest.mark.network
def test_shipped_spark_series_pass(spark, vllm_tree, flashinfer_tree):
    for name in spark.spec.stacks:
        for series in preflight_stack(one(spark, name)):
            assert series.ok, series.problems()


@pytest.mark.network
def test_sdist_pin_mismatch_is_refused(pinned_sources):
    pinned_sources.sdist("vllm", "0.33.0")  # the real file is in the cache; the pin below is not its
    src = sources.Source("vllm", "pypi", "vllm", "0.33.0", "0" * 64)
    with pytest.raises(Exception, match="does not match the pinned sdist_sha256"):
        sources.sdist(src)


PARSE = [
    ("error: patch failed: CMakeLists.txt:228\nerror: CMakeLists.txt: patch does not apply\n",
     ("CMakeLists.txt", 228, "patch does not apply")),
    ("error: csrc/gone.cu: No such file or directory\n", ("csrc/gone.cu", None, "No such file or directory")),
    ("error: new.py: already exists in working directory\n", ("new.py", None, "already exists in working directory")),
]


@pytest.mark.parametrize(("stderr", "expected"), PARSE)
def test_parse_failure(stderr, expected):
    assert parse_failure(stderr) == expected


@pytest.mark.parametrize("named", ["../../canary/secret.txt", "linked/secret.txt"])
def test_a_patch_naming_a_path_outside_the_tree_copies_nothing_out(tmp_path, named):
    """The paths a patch names are data: the scratch copy takes files from inside the tree only,
    through no link, and writes nothing outside the scratch folder."""
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "secret.txt").write_text("secret\n")
    tree = tmp_path / "a" / "tree"
    tree.mkdir(parents=True)
    (tree / "file.txt").write_text("one\n")
    (tree / "linked").symlink_to(canary)
    patch = tmp_path / "evil.patch"
    patch.write_text(f"--- a/{named}\n+++ b/{named}\n@@ -1 +1 @@\n-secret\n+owned\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = apply_series(tree, [(patch.name, patch)], project="vllm")
    assert not result.ok
    assert (canary / "secret.txt").read_text() == "secret\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written outside the scratch copy
