"""Build requirements read from the pinned sources (harness/image/requirements.py), checked before
any image step; and docker/build_requirements.py, which meets them inside the image.

The real cases read the vLLM 0.33.0 and FlashInfer 0.7.2.post1 sdists (the `pinned_sources`
fixture: cached, or fetched from PyPI: network); the others read small trees made here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.builds import one

from harness import platforms
from harness.errors import ConfigError
from harness.image import requirements, sources
from harness.image.dockerfile import render
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "docker" / "build_requirements.py"


@pytest.fixture(scope="module")
def spark():
    return load_matrix(ROOT / "matrix" / "spark.toml")


@pytest.fixture(scope="module")
def spark_sources(spark, pinned_sources):
    """spark.toml, with its stacks' vLLM and FlashInfer trees in the cache the tests read."""
    stack = spark.spec.stacks["spark-121a"]
    pinned_sources.tree(sources.vllm_source(stack))
    pinned_sources.tree(sources.flashinfer_source(stack))
    return spark


@pytest.mark.network
def test_vllm_0330_lists_what_its_own_files_say(spark_sources):
    spark = spark_sources
    reqs = requirements.for_stack("spark-121a", spark.spec.stacks["spark-121a"], platforms.AMD64)
    by_name = {n: (spec, origins) for n, spec, origins in requirements.merged(reqs.items)}
    # the two things the hand-kept list missed: setuptools-rust (setup.py imports it) and <81
    assert "setuptools-rust" in by_name and ">=1.9.0" in by_name["setuptools-rust"][0]
    assert "<81.0.0" in by_name["setuptools"][0]
    assert by_name["setuptools"][1] == ["vllm-0.33.0/pyproject.toml", "vllm-0.33.0/requirements/build/cuda.txt",
                                        "flashinfer-python-0.7.2.post1/pyproject.toml"]
    assert by_name["apache-tvm-ffi"][1] == ["flashinfer-python-0.7.2.post1/pyproject.toml"]
    assert "torch" not in by_name  # installed from the stack's index, checked apart
    assert [t.requirement for t in reqs.torch] == ["torch==2.14.0", "torch==2.14.0"]
    text = reqs.file_text()
    assert "setuptools-rust>=1.9.0  # vllm-0.33.0/pyproject.toml, vllm-0.33.0/requirements/build/cuda.txt" in text


@pytest.mark.network
def test_a_torch_pin_the_release_does_not_build_with_is_refused_before_any_step(spark_sources):
    spark = spark_sources
    st = spark.spec.stacks["spark-stock"]
    stack = st.model_copy(update={"torch": st.torch.model_copy(update={"version": "2.11.0"})})
    with pytest.raises(ConfigError) as exc:
        requirements.for_stack("spark-stock", stack, platforms.AMD64)
    assert "stacks.spark-stock.torch.version" in exc.value.message
    assert "vllm-0.33.0/pyproject.toml requires torch==2.14.0" in exc.value.message


@pytest.mark.network
def test_render_puts_the_file_in_the_context_without_changing_the_tag(spark_sources):
    r = render(one(spark_sources, "spark-121a", platform=platforms.AMD64))
    files = dict(r.files)
    assert b"setuptools-rust" in files["build-requirements.txt"] and "build_requirements.py" in files
    assert "RUN python /opt/build/build_requirements.py /opt/build/build-requirements.txt" in r.dockerfile
    # the hand-kept list is gone from the template
    assert '"setuptools>=77" setuptools-scm wheel build' not in r.dockerfile
    # `plan` names the same tag without reading the sources
    assert render(one(spark_sources, "spark-121a", platform=platforms.AMD64), requirements=False).image_ref == r.image_ref


def test_the_platform_is_in_the_tag_and_the_hash(spark):
    amd = render(one(spark, "spark-121a", platform=platforms.AMD64), requirements=False)
    arm = render(one(spark, "spark-121a", platform=platforms.ARM64), requirements=False)
    assert amd.image_ref.startswith("vllm-bw:spark-121a-amd64-") and arm.image_ref.startswith("vllm-bw:spark-121a-arm64-")
    assert amd.content_hash != arm.content_hash
    assert arm.labels["harness.platform"] == "linux/arm64"


def _tree(tmp_path: Path, pyproject: str, build_txt: str | None = None, name: str = "proj") -> Path:
    tree = tmp_path / name
    (tree / "requirements" / "build").mkdir(parents=True)
    (tree / "pyproject.toml").write_text(pyproject)
    if build_txt is not None:
        (tree / "requirements" / "build" / "cuda.txt").write_text(build_txt)
    return tree


def test_markers_follow_the_platform_and_index_options_are_not_followed(tmp_path):
    tree = _tree(tmp_path, '[build-system]\nrequires = ["wheel"]\n',
                 '--extra-index-url https://example.invalid/simple\n'
                 'arm-only>=1; platform_machine == "aarch64"\nx86-only; platform_machine == "x86_64"\n'
                 '-r ../common.txt\n')
    (tree / "requirements" / "common.txt").write_text("regex  # a comment\n")
    pairs, _ = requirements.read_tree(tree, "vllm", "stacks.s", "vllm-9.9")
    assert [p[0] for p in pairs] == ["wheel", 'arm-only>=1; platform_machine == "aarch64"',
                                     'x86-only; platform_machine == "x86_64"', "regex"]
    assert pairs[-1][1] == "vllm-9.9/requirements/common.txt"


@pytest.mark.parametrize("build_txt,says", [
    ("evil @ https://example.invalid/evil.whl\n", "from https://example.invalid/evil.whl, not from an index"),
    ("not a requirement !!\n", "cannot be parsed"),
    ("-r ../../../../etc/passwd\n", "outside the source tree"),
])
def test_what_the_template_cannot_meet_is_refused_by_name(tmp_path, monkeypatch, spark, build_txt, says):
    tree = _tree(tmp_path, '[build-system]\nrequires = ["wheel"]\n', build_txt)
    monkeypatch.setattr(sources, "tree", lambda _src: tree)
    with pytest.raises(ConfigError) as exc:
        requirements.for_stack("s", spark.spec.stacks["spark-121a"], platforms.AMD64)
    assert says in exc.value.message and exc.value.message.startswith("stacks.s")


def test_requires_python_is_checked_against_the_stack(tmp_path, monkeypatch, spark):
    tree = _tree(tmp_path, '[build-system]\nrequires = []\n[project]\nrequires-python = ">=3.13"\n')
    monkeypatch.setattr(sources, "tree", lambda _src: tree)
    with pytest.raises(ConfigError) as exc:
        requirements.for_stack("s", spark.spec.stacks["spark-121a"], platforms.AMD64)
    assert "stacks.s.python" in exc.value.message and "requires Python >=3.13" in exc.value.message


def test_the_image_script_installs_what_is_missing_and_names_what_stays_unmet(tmp_path):
    # a real venv, no index: a requirement met by the venv passes; one it cannot get is named
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    reqs = tmp_path / "build-requirements.txt"
    reqs.write_text("pip>=1  # made/pyproject.toml\nharness-no-such-package>=1  # made/requirements/build/cuda.txt\n")
    res = subprocess.run([str(py), str(SCRIPT), str(reqs), "--no-index"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert ("harness: build requirement harness-no-such-package>=1 from made/requirements/build/cuda.txt "
            "is not met: not installed") in res.stderr
    assert "build requirement pip>=1: " in res.stdout
    reqs.write_text("pip>=1  # made/pyproject.toml\n")
    res = subprocess.run([str(py), str(SCRIPT), str(reqs), "--no-index"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.network
def test_the_packaging_probe_stands_in_for_every_extension_of_vllm_0330(spark, tmp_path, pinned_sources):
    import shutil

    sys.path.insert(0, str(ROOT / "docker"))
    try:
        import packaging_probe
    finally:
        sys.path.remove(str(ROOT / "docker"))
    tree = pinned_sources.tree(sources.vllm_source(spark.spec.stacks["spark-121a"]))
    work = tmp_path / "vllm"
    work.mkdir()
    shutil.copy(tree / "setup.py", work / "setup.py")
    shutil.copy(tree / "CMakeLists.txt", work / "CMakeLists.txt")
    shutil.copytree(tree / "cmake", work / "cmake")
    assert packaging_probe.stand_in(work) == 0
    text = (work / "CMakeLists.txt").read_text()
    real = (work / packaging_probe.REAL).read_text()
    assert "harness packaging probe" in text and "FetchContent" in real  # the real one kept aside
    # every target setup.py may ask for (CUDA's among them), where vLLM's CMake installs it
    for target, dest in (("_C", "vllm"), ("_moe_C_stable_libtorch", "vllm"), ("_vllm_fa2_C", "vllm/vllm_flash_attn"),
                         ("cumem_allocator", "vllm"), ("_flashmla_C", "vllm")):
        assert f"install(TARGETS {target} LIBRARY DESTINATION {dest} COMPONENT {target})" in text
    # the Python-only components are custom targets with their folder, as in vLLM's own CMake
    for target in ("triton_kernels", "fmha_sm100", "tml_fa4"):
        assert f"add_custom_target({target})" in text and f"vllm/third_party/{target}" in text


def test_pyproject_tables_are_read_through_their_model(tmp_path):
    from harness.image.requirements import read_tree

    tree = tmp_path / "vllm-0.33.0"
    tree.mkdir()
    (tree / "pyproject.toml").write_text('[build-system]\nrequires = ["cmake>=3.26", "ninja"]\n'
                                         '[project]\nrequires-python = ">=3.10"\n[tool.x]\ny = 1\n')
    pairs, rp = read_tree(tree, "vllm", "stacks.s")
    assert pairs[:2] == [("cmake>=3.26", "vllm-0.33.0/pyproject.toml"), ("ninja", "vllm-0.33.0/pyproject.toml")]
    assert rp == ">=3.10"
    (tree / "pyproject.toml").write_text('build-system = "odd"\nproject = 3\n')  # tables of another type: empty
    assert read_tree(tree, "vllm", "stacks.s") == ([], None)
    (tree / "pyproject.toml").write_text('[build-system]\nrequires = "cmake"\n')
    with pytest.raises(ConfigError, match=r"\[build-system\] requires is not a list of strings"):
        read_tree(tree, "vllm", "stacks.s")
