"""Pinned offline sources for vLLM source builds: the table, the content pin, the cache, the
air-gap hand-over, the offline render and the configure-log check.

Real pieces: git repositories made here with the real `git` (a parent with a submodule-like
second repository), the vLLM 0.25.1 PyPI sdist (its CMake files hold every name and override
variable the table declares), and configure logs of that sdist captured with nvcc 13.0
(tests/fixtures/build/cmake/vllm-0.25.1-*.configure.log).
"""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path

import pytest
from support.builds import one
from support.gitrepo import make_repo, run_git

from harness.errors import ConfigError, EnvironmentProblem
from harness.image import offline, sources
from harness.image.offline_stack import left_out, offline_parts
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
CMAKE = ROOT / "tests" / "fixtures" / "build" / "cmake"
FIXTURE_ARCHIVES = ROOT / "tests" / "fixtures" / "offline"  # trimmed, pinned source archives
VLLM_0251_SHA = "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4"




@pytest.fixture()
def repos(tmp_path):
    sub = make_repo(tmp_path / "sub", {"include/a.h": "int a;\n", "docs/big.md": "not kept\n"})
    make_repo(tmp_path / "top", {"CMakeLists.txt": "project(x)\n", "src/k.cu": "__global__ void k(){}\n",
                             "tests/t.py": "not kept\n"})
    # the parent names the submodule's commit, as `git submodule add` records it
    run_git("update-index", "--add", "--cacheinfo", f"160000,{sub},third/sub", cwd=tmp_path / "top")
    run_git("commit", "-qm", "submodule", cwd=tmp_path / "top")
    return tmp_path, run_git("rev-parse", "HEAD", cwd=tmp_path / "top"), sub


def _pin(top: str, sub: str, sha: str = "0" * 64) -> offline.Pin:
    return offline.Pin("demo", "https://example.invalid/top.git", top, "DEMO_SRC_DIR",
                       ("CMakeLists.txt", "src", "third/sub/include"),
                       (("third/sub", "https://example.invalid/sub.git", sub),), sha)


def _mirrors(tmp: Path) -> dict[str, str]:
    return {"https://example.invalid/top.git": str(tmp / "top"), "https://example.invalid/sub.git": str(tmp / "sub")}


def test_trim_keeps_only_what_the_build_reads_and_the_pin_is_of_content(repos):
    tmp, top, sub = repos
    tree = tmp / "tree"
    offline.assemble(_pin(top, sub), _mirrors(tmp), tree)
    got = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    assert got == ["CMakeLists.txt", "src/k.cu", "third/sub/include/a.h"]
    digest = offline.tree_sha256(tree)
    (tree / "src" / "k.cu").write_text("__global__ void k(){ }\n")
    assert offline.tree_sha256(tree) != digest
    (tree / "src" / "k.cu").write_text("__global__ void k(){}\n")
    assert offline.tree_sha256(tree) == digest
    (tree / "src" / "k.cu").chmod(0o755)
    assert offline.tree_sha256(tree) != digest


def test_fetch_checks_the_pin_and_hands_archives_to_an_air_gapped_cache(repos):
    tmp, top, sub = repos
    tree = tmp / "t"
    offline.assemble(_pin(top, sub), _mirrors(tmp), tree)
    pin = _pin(top, sub, offline.tree_sha256(tree))
    with pytest.raises(ConfigError, match="does not match the pin"):
        offline.fetch(_pin(top, sub), repos=_mirrors(tmp), cache=tmp / "c0")
    archive = offline.fetch(pin, repos=_mirrors(tmp), cache=tmp / "c1")
    assert archive.name == f"demo-{top[:12]}.tar.xz"
    with tarfile.open(archive) as t:
        assert {m.uid for m in t.getmembers()} == {0} and {m.mtime for m in t.getmembers()} == {0}
    usb = tmp / "usb"
    usb.mkdir()
    shutil.copy(archive, usb)
    got = offline.fetch(pin, from_dir=usb, cache=tmp / "c2")  # no git, no network: checked archive
    assert got.read_bytes() == archive.read_bytes()
    # a tampered archive is refused by its content
    bad = tmp / "bad"
    shutil.copytree(tree, bad / "x")
    (bad / "x" / "src" / "k.cu").write_text("evil\n")
    offline.pack(bad / "x", tmp / "evil" / pin.archive_name)
    with pytest.raises(ConfigError, match="content sha256"):
        offline.fetch(pin, from_dir=tmp / "evil", cache=tmp / "c3")
    with pytest.raises(EnvironmentProblem, match="does not exist"):
        offline.fetch(pin, from_dir=tmp / "nothing-here", cache=tmp / "c4")


def test_a_submodule_commit_other_than_the_parents_is_refused(repos):
    tmp, top, sub = repos
    other = run_git("commit-tree", "-m", "other", run_git("write-tree", cwd=tmp / "sub"), cwd=tmp / "sub")
    with pytest.raises(ConfigError, match=f"pins submodule third/sub at {other}, but {top[:12]}'s tree names {sub}"):
        offline.assemble(_pin(top, other), _mirrors(tmp), tmp / "t")


def test_a_commit_missing_from_the_mirror_is_named(repos):
    tmp, top, sub = repos
    pin = _pin("1" * 40, sub)
    with pytest.raises(EnvironmentProblem, match="cannot export 1111111111"):
        offline.fetch(pin, repos=_mirrors(tmp), cache=tmp / "c")


@pytest.fixture(scope="module")
def vllm_0251_tree(pinned_sources):
    return pinned_sources.tree(sources.Source("vllm", "pypi", "vllm", "0.25.1", VLLM_0251_SHA))


@pytest.mark.network
def test_table_matches_what_vllm_0251_cmake_fetches(vllm_0251_tree):
    """Every declared source: its override variable and its pin appear in the vLLM file named."""
    table = offline.load_table("0.25.1")
    raw = __import__("tomllib").loads(table.path.read_text())
    entries = raw["sources"] + raw["unpinned"]
    assert {e["name"] for e in entries} == {"cutlass", "flash-attention", "qutlass", "flashmla", "deepgemm",
                                            "triton_kernels", "fmha_sm100"}
    for e in entries:
        declared = vllm_0251_tree / e["declared_in"].split(" ")[0]
        text = declared.read_text()
        assert f"ENV{{{e['env']}}}" in text, (e["name"], declared)
        assert (e.get("commit") and e["commit"] in text) or (e.get("ref") and e["ref"] in text), e["name"]
        repo = e["url"].removesuffix(".git").lower()
        assert repo in text.lower(), e["name"]
    # and nothing else is fetched: every FetchContent/ExternalProject source is in the table
    declared_files = {e["declared_in"].split(" ")[0] for e in entries}
    cmake_files = ["CMakeLists.txt", *(f"cmake/external_projects/{p.name}"
                                       for p in (vllm_0251_tree / "cmake" / "external_projects").glob("*.cmake"))]
    fetching = {f for f in cmake_files if "GIT_REPOSITORY" in (vllm_0251_tree / f).read_text()}
    assert fetching == declared_files


def test_configure_log_names_the_sources_cmake_tried_to_fetch():
    table = offline.load_table("0.25.1")
    tried = offline.fetch_attempts((CMAKE / "vllm-0.25.1-uncut-no-network.configure.log").read_text(), table)
    assert tried == ["deepgemm", "triton_kernels"]
    assert offline.fetch_attempts((CMAKE / "vllm-0.25.1-cut-9.0a_12.1a.configure.log").read_text(), table) == []


def test_cut_patch_declares_what_it_leaves_out():
    cut = (ROOT / "patches" / "vllm" / "0002-vllm-0.25.1-cut-for-a-short-build.patch").read_bytes()
    arch = (ROOT / "patches" / "vllm" / "0001-vllm-0.25.1-cmake-sm121a-on-cuda13.patch").read_bytes()
    assert left_out([arch]) == set()
    assert left_out([arch, cut]) == {"flash-attention", "flashmla", "qutlass", "deepgemm", "triton_kernels",
                                     "fmha_sm100"}
    assert left_out([cut]) <= set(offline.load_table("0.25.1").names)


def _offline_matrix(tmp_path: Path, patches: str, wheelhouse: str = "") -> Path:
    text = (ROOT / "matrix" / "h200-source.toml").read_text()
    text = text.replace('deps_wheelhouse = "/tmp/deps-wheelhouse"', wheelhouse)
    old = text[text.index("patches = [\"vllm/0001"):text.index("]", text.index("patches = [\"vllm/0001")) + 1]
    path = ROOT / "matrix" / f".test-offline-{tmp_path.name}.toml"  # patches resolve from matrix/
    path.write_text(text.replace(old, patches))
    return path


@pytest.fixture(scope="module")
def offline_sdists(pinned_sources):
    """The two sdists an offline render reads from the cache (downloaded once, sha256 checked)."""
    pinned_sources.tree("vllm", "0.25.1")
    pinned_sources.tree("flashinfer-python", "0.6.13")


ARCH = ROOT / "patches" / "vllm" / "0001-vllm-0.25.1-cmake-sm121a-on-cuda13.patch"
CUT = ROOT / "patches" / "vllm" / "0002-vllm-0.25.1-cut-for-a-short-build.patch"


@pytest.mark.network
def test_offline_render_errors_name_the_missing_piece_and_the_fix(offline_sdists, tmp_path, monkeypatch):
    monkeypatch.setattr(offline, "OFFLINE", tmp_path / "empty-cache")
    path = _offline_matrix(tmp_path, 'patches = ["vllm/0001-vllm-0.25.1-cmake-sm121a-on-cuda13.patch"]')
    try:
        m = load_matrix(path)
        stack = m.spec.stacks["src-0251"]
        with pytest.raises(ConfigError, match="triton_kernels, fmha_sm100, which vllm-0.25.1.toml does not pin"):
            offline_parts(m, "src-0251", stack, [ARCH.read_bytes()])
        with pytest.raises(ConfigError, match="cutlass .* is not in the cache") as exc:
            offline_parts(m, "src-0251", stack, [ARCH.read_bytes(), CUT.read_bytes()])
        assert "harness sources fetch" in exc.value.hint
    finally:
        path.unlink()


@pytest.mark.network
def test_offline_render_hands_every_input_over_in_the_context(offline_sdists, tmp_path, monkeypatch):
    from harness.image.dockerfile import render
    from harness.image.probe import load_units, render_packaging, render_probe

    cache = tmp_path / "cache"
    cache.mkdir()
    pin = offline.load_table("0.25.1").pins[0]
    (cache / pin.archive_name).write_bytes(b"archive bytes")  # content was checked on entering the cache
    monkeypatch.setattr(offline, "OFFLINE", cache)
    path = _offline_matrix(tmp_path, 'patches = ["vllm/0001-vllm-0.25.1-cmake-sm121a-on-cuda13.patch", '
                                     '"vllm/0002-vllm-0.25.1-cut-for-a-short-build.patch"]')
    try:
        m = load_matrix(path)
        r = render(one(m, "src-0251"))
    finally:
        path.unlink()
    text = r.dockerfile
    names = dict(r.files)
    assert names[f"sources/{pin.archive_name}"] == b"archive bytes"
    assert "sources/vllm-0.25.1.tar.gz" in names and "sources/flashinfer_python-0.6.13.tar.gz" in names
    assert r.buildargs["VLLM_SOURCE"] == "file /opt/build/sources/vllm-0.25.1.tar.gz 0.25.1"
    assert 'export CMAKE_ARGS="-DFETCHCONTENT_FULLY_DISCONNECTED=ON" VLLM_CUTLASS_SRC_DIR=/opt/build/deps/cutlass' in text
    assert "pip install --no-build-isolation --no-index --no-deps -v ." in text
    # the vLLM build is two RUN steps: a compile step whose layer survives a later failure,
    # then the install step, with the same offline environment, that fails the build
    build = text.split("--- vLLM build")[1].split("--- runtime")[0]
    compile_step, install_step = build.split("\nRUN ")[1:]
    assert "python setup.py build_ext 2>&1 | tee /opt/build/vllm-build.log" in compile_step
    assert "|| echo" in compile_step and "pip install" not in compile_step
    assert "tee -a /opt/build/vllm-build.log" in install_step and "|| echo" not in install_step
    for step in (compile_step, install_step):
        assert 'export CMAKE_ARGS="-DFETCHCONTENT_FULLY_DISCONNECTED=ON"' in step
        assert 'TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS}"' in step
    # both steps compile through the compile cache (harness/image/compile_cache.py); its helper
    # sits in the stage's head, which the probes keep; the store and its secret come with the
    # build (the steps' /etc/hosts), never as a build argument
    for step in (compile_step, install_step):
        assert 'eval "$(python /opt/build/compile_cache.py env)"' in step
    assert "compile_cache.py stats compile" in compile_step and "compile_cache.py stats install" in install_step
    head = text.split("--- vLLM build")[0].split("AS vllm")[1]
    assert "COPY compile_cache.py /opt/build/compile_cache.py" in head and "COMPILE_CACHE" not in text
    assert "apt-get" not in text and "--index-url" not in text  # a local base: nothing from an index
    assert "python -m flashinfer.aot" not in text  # aot = false
    assert r.labels["harness.vllm.left-out"] == "deepgemm,flash-attention,flashmla,fmha_sm100,qutlass,triton_kernels"
    assert r.labels["harness.vllm.offline-sources"].startswith(f"cutlass@{pin.commit[:12]} sha256:{pin.sha256}")
    p = render_probe(r, one(m, "src-0251"), load_units("0.25.1"))
    assert "FROM flashinfer" not in p.dockerfile and "FROM base AS vllm" in p.dockerfile
    assert "probe_build.py --units" in p.dockerfile and "pip install --no-build-isolation" not in p.dockerfile.split(
        "--- vLLM build")[1]
    assert p.content_hash != r.content_hash and p.labels["harness.role"] == "probe"
    probe_step = p.dockerfile.split("--- vLLM build")[1]
    assert "compile_cache.py env" in probe_step and "compile_cache.py stats compile" in probe_step
    pk = render_packaging(r, one(m, "src-0251")).dockerfile
    assert pk.index("COPY compile_cache.py") < pk.index("compile_cache.py env") < pk.index("compile_cache.py stats install")


def _read_by_build(vllm_tree: Path, name: str) -> set[str]:
    """The paths of a source tree vLLM 0.25.1's build names: its CMake file's `${name_SOURCE_DIR}/...`
    (a glob counts as its folder) and, for DeepGEMM, what tools/build_deepgemm_C.py compiles."""
    cmake = (vllm_tree / "cmake" / "external_projects" / f"{name}.cmake").read_text()
    found = {m.split("*")[0].rstrip("/") for m in re.findall(rf"\$\{{{name}_SOURCE_DIR\}}/([^\s\")]+)", cmake)}
    if name == "deepgemm":
        found |= set(re.findall(r'src / "([^"]+)"', (vllm_tree / "tools" / "build_deepgemm_C.py").read_text()))
    return {p for p in found if p}


@pytest.mark.network
@pytest.mark.parametrize("name", ["flashmla", "deepgemm"])
def test_a_new_pin_verifies_and_holds_what_the_build_reads(vllm_0251_tree, name, tmp_path):
    """The trimmed archive (made by tools/pin-offline-sources.py from the pinned commit, shipped in
    tests/fixtures/offline) enters a cache as an air-gapped host takes it, has exactly the pinned
    content, and holds every path vLLM's build names (the network: the vLLM sdist only)."""
    pin = next(p for p in offline.load_table("0.25.1").pins if p.name == name)
    archive = offline.fetch(pin, from_dir=FIXTURE_ARCHIVES, cache=tmp_path / "cache")
    offline.check_archive(pin, archive)
    tree = tmp_path / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    assert offline.tree_sha256(tree) == pin.sha256
    wanted = _read_by_build(vllm_0251_tree, name)
    assert len(wanted) > 5, wanted  # the reader found the build's list, not nothing
    assert sorted(p for p in wanted if not (tree / p).exists()) == []
    for sub_path, _url, _commit in pin.submodules:  # the pinned CUTLASS / fmt headers are there
        assert any((tree / sub_path / "include").rglob("*.h*")), sub_path


@pytest.mark.parametrize("damage", ["truncated", "other content"])
def test_a_corrupted_archive_of_a_table_pin_is_refused_naming_the_source(tmp_path, damage):
    pin = next(p for p in offline.load_table("0.25.1").pins if p.name == "deepgemm")
    usb = tmp_path / "usb"
    tree = tmp_path / "t" / "csrc"
    tree.mkdir(parents=True)
    (tree / "python_api.cpp").write_text("int main() {}\n")
    offline.pack(tmp_path / "t", usb / pin.archive_name)
    if damage == "truncated":
        data = (usb / pin.archive_name).read_bytes()
        (usb / pin.archive_name).write_bytes(data[: len(data) // 2])
    kind = EnvironmentProblem if damage == "truncated" else ConfigError
    with pytest.raises(kind) as exc:
        offline.fetch(pin, from_dir=usb, cache=tmp_path / "cache")
    assert exc.value.message.startswith(f"deepgemm: {usb / pin.archive_name}")
    assert "--out DIR" in exc.value.hint
    assert not (tmp_path / "cache" / pin.archive_name).exists()  # nothing refused enters the cache
    # the same archive already in the cache is refused when checked (as `harness lock` does)
    (tmp_path / "cache").mkdir(exist_ok=True)
    shutil.copy(usb / pin.archive_name, tmp_path / "cache")
    with pytest.raises(kind, match="^deepgemm: "):
        offline.fetch(pin, cache=tmp_path / "cache", check_cached=True)


def test_an_xz_bomb_in_the_source_cache_stops_at_the_bound(tmp_path, monkeypatch):
    """An archive that unpacks past the bound is refused at the member header that crosses it,
    before its data is inflated to the end of the disk; a link planted in --from is refused."""
    import io
    import lzma

    pin = next(p for p in offline.load_table("0.25.1").pins if p.name == "deepgemm")
    monkeypatch.setattr(offline, "ARCHIVE_MAX_UNPACKED", 1 << 20)
    raw = io.BytesIO()
    with lzma.open(raw, "wb", preset=1) as xw, tarfile.open(fileobj=xw, mode="w") as tar:
        info = tarfile.TarInfo("csrc/zeros.bin")
        info.size = 64 << 20  # 64 MiB of zeros: a few KB of xz
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / pin.archive_name).write_bytes(raw.getvalue())
    assert len(raw.getvalue()) < 1 << 20
    with pytest.raises(EnvironmentProblem, match="unpacks to more than"):
        offline.check_archive(pin, cache / pin.archive_name)
    usb = tmp_path / "usb"
    usb.mkdir()
    (usb / pin.archive_name).symlink_to(cache / pin.archive_name)
    with pytest.raises(ConfigError, match="symbolic link"):
        offline.fetch(pin, from_dir=usb, cache=tmp_path / "other")


VLLM_0330_SHA = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
PROBE_CUT = ROOT / "patches" / "vllm" / "vllm-0.33.0-probe-offline.patch"
ARCH_0330 = ROOT / "patches" / "vllm" / "0001-cmake-sm121a-on-cuda13.patch"


@pytest.fixture(scope="module")
def vllm_0330_tree(pinned_sources):
    return pinned_sources.tree(sources.Source("vllm", "pypi", "vllm", "0.33.0", VLLM_0330_SHA))


@pytest.mark.network
def test_table_matches_what_vllm_0330_cmake_fetches(vllm_0330_tree):
    """Every source 0.33.0's CMake fetches is in its table, with the override variable and the
    commit (or tag) the named file holds; a stand-in names the ref it replaces, from that file."""
    table = offline.load_table("0.33.0")
    raw = __import__("tomllib").loads(table.path.read_text())
    entries = raw["sources"] + raw["unpinned"]
    assert {e["name"] for e in entries} == {"cutlass", "flash-attention", "qutlass", "flashmla", "deepgemm",
                                            "deepselect", "flashkda", "tml_fa4", "fmha_sm100", "triton_kernels"}
    for e in entries:
        declared = vllm_0330_tree / e["declared_in"].split(" ")[0]
        text = declared.read_text()
        assert f"ENV{{{e['env']}}}" in text, (e["name"], declared)
        assert (e.get("commit") and e["commit"] in text) or (e.get("ref") and f'"{e["ref"]}"' in text), e["name"]
        assert e["url"].removesuffix(".git").lower() in text.lower(), e["name"]
    for u in raw["unpinned"]:
        assert u["why"], u["name"]  # each says what was missing
    declared_files = {e["declared_in"].split(" ")[0] for e in entries}
    cmake_files = ["CMakeLists.txt", *(f"cmake/external_projects/{p.name}"
                                       for p in (vllm_0330_tree / "cmake" / "external_projects").glob("*.cmake"))]
    fetching = {f for f in cmake_files if "GIT_REPOSITORY" in (vllm_0330_tree / f).read_text()}
    assert fetching == declared_files
    (cutlass,) = table.stand_ins
    assert (cutlass.name, cutlass.stands_in_for) == ("cutlass", "v4.7.1")
    assert 'set(CUTLASS_REVISION "v4.7.1")' in (vllm_0330_tree / "CMakeLists.txt").read_text()


def test_the_0330_archives_hold_the_pinned_content_and_what_the_build_reads(tmp_path):
    """The trimmed archives shipped in tests/fixtures/offline (made by tools/pin-offline-sources.py
    from public snapshots) enter a cache as an air-gapped host takes them, content sha256 checked."""
    table = offline.load_table("0.33.0")
    for pin in (*table.pins, *table.stand_ins):
        archive = offline.fetch(pin, from_dir=FIXTURE_ARCHIVES, cache=tmp_path / "cache")
        with tarfile.open(archive) as tar:
            names = set(tar.getnames())
        assert {k for k in pin.keep if not any(n == k or n.startswith(k + "/") for n in names)} == set(), pin.name
    qutlass = next(p for p in table.pins if p.name == "qutlass")
    with tarfile.open(tmp_path / "cache" / qutlass.archive_name) as tar:
        names = set(tar.getnames())
    # what qutlass.cmake compiles (its sources, against vLLM's CUTLASS: no submodule kept)
    assert {"qutlass/csrc/bindings.cpp", "qutlass/csrc/gemm.cu", "qutlass/csrc/fused_quantize_nv.cu"} <= names


def test_patch_lines_leave_out_and_stand_in_and_the_rest_stays_unpinned():
    from harness.image.offline_stack import plan_sources, stood_in

    table = offline.load_table("0.33.0")
    plain = plan_sources("stacks.s", table, [ARCH_0330.read_bytes()])
    assert [p.name for p in plain.pins] == ["qutlass"] and plain.stand_ins == ()
    assert set(plain.unpinned) == set(table.names) - {"qutlass"}
    probe = plan_sources("stacks.s", table, [ARCH_0330.read_bytes(), PROBE_CUT.read_bytes()])
    assert stood_in([PROBE_CUT.read_bytes()]) == {"cutlass"} and stood_in([ARCH_0330.read_bytes()]) == set()
    assert [(p.name, p.commit[:8], p.stands_in_for) for p in probe.pins] == [
        ("qutlass", "e74319e3", ""), ("cutlass", "dcf215af", "v4.7.1")]
    assert probe.unpinned == () and probe.cut == {"flash-attention", "flashmla", "deepgemm", "deepselect",
                                                  "flashkda", "tml_fa4", "fmha_sm100", "triton_kernels"}
    asks = b"Stand-in: flashmla\n\ndiff --git a/x b/x\n"
    with pytest.raises(ConfigError, match="stand-in for flashmla, which vllm-0.33.0.toml has none of"):
        plan_sources("stacks.s", table, [asks])
    both = b"Stand-in: cutlass\nLeaves-out: cutlass\n\ndiff --git a/x b/x\n"
    with pytest.raises(ConfigError, match="both leaves out and stands in for cutlass"):
        plan_sources("stacks.s", table, [both])
    # a line after the first `diff --git` is patch content, not a header line
    assert stood_in([b"diff --git a/x b/x\n+Stand-in: cutlass\n"]) == set()


def test_a_stand_in_must_replace_an_unpinned_source(tmp_path):
    text = (offline.TABLES / "vllm-0.33.0.toml").read_text()
    bad = tmp_path / "vllm-9.9.9.toml"
    bad.write_text(text.replace('name = "cutlass"\nstands_in_for', 'name = "qutlass"\nstands_in_for'))
    with pytest.raises(ConfigError, match="stand_ins: 'qutlass' is not an \\[\\[unpinned\\]\\] source"):
        offline.load_table("9.9.9", bad)


@pytest.mark.network
def test_an_offline_render_with_a_stand_in_names_it_in_its_labels(tmp_path, monkeypatch, pinned_sources):
    """The probe matrix tools/defaults_probe.py writes: the stand-in archive enters the context and
    the image's labels; without the probe patch the same stack is refused, naming every unpinned source."""
    import sys

    from harness.image.dockerfile import render

    pinned_sources.tree("vllm", "0.33.0")  # the render reads their build requirements
    pinned_sources.tree("flashinfer-python", "0.7.2.post1")
    monkeypatch.setattr(offline, "OFFLINE", tmp_path / "cache")
    table = offline.load_table("0.33.0")
    for pin in (*table.pins, *table.stand_ins):
        offline.fetch(pin, from_dir=FIXTURE_ARCHIVES, cache=offline.OFFLINE)
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import defaults_probe
    finally:
        sys.path.remove(str(ROOT / "tools"))
    path = defaults_probe.variant(ROOT / "matrix" / "spark.toml", "amd64", units=True)
    m = load_matrix(path)
    r = render(one(m, "spark-121a", base_image_id="sha256:" + "0" * 64), requirements=False)
    assert r.labels["harness.vllm.stand-ins"] == "cutlass@dcf215af68a2 for v4.7.1"
    assert r.labels["harness.vllm.left-out"] == "deepgemm,deepselect,flash-attention,flashkda,flashmla,fmha_sm100,tml_fa4,triton_kernels"
    assert "VLLM_CUTLASS_SRC_DIR=/opt/build/deps/cutlass" in r.dockerfile
    assert "sources/cutlass-dcf215af68a2.tar.xz" in dict(r.files)
    stack = m.spec.stacks["spark-121a"]
    with pytest.raises(ConfigError, match="fetches cutlass, flash-attention, flashmla, deepgemm, deepselect, flashkda, "
                                          "tml_fa4, fmha_sm100, triton_kernels, which vllm-0.33.0.toml does not pin"):
        offline_parts(m, "spark-121a", stack, [ARCH_0330.read_bytes()])


def test_the_pin_tool_rewrites_the_sha256_of_sources_and_stand_ins_and_nothing_else(repos, tmp_path):
    """tools/pin-offline-sources.py on a table with a [[sources]] entry, an [[unpinned]] one and a
    [[stand_ins]] one (real git repositories made here, read as mirrors): both digests are the
    trimmed trees', every other byte of the file stays."""
    import subprocess
    import sys

    tmp, top, sub = repos
    table = tmp_path / "t.toml"
    text = f'''vllm = "9.9.9"
read_from = "here"

[[sources]]
name = "demo"
url = "https://example.invalid/top.git"
commit = "{top}"
env = "DEMO_SRC_DIR"
declared_in = "x"
keep = ["CMakeLists.txt", "src", "third/sub/include"]
submodules = [{{ path = "third/sub", url = "https://example.invalid/sub.git", commit = "{sub}" }}]
sha256 = ""

[[unpinned]]
name = "other"
url = "https://example.invalid/other.git"
env = "OTHER_SRC_DIR"
declared_in = "y"

[[stand_ins]]
name = "other"
stands_in_for = "v2"
url = "https://example.invalid/top.git"
commit = "{top}"
env = "OTHER_SRC_DIR"
declared_in = "y"
keep = ["src"]
sha256 = ""
'''
    table.write_text(text)
    mirrors = [f"{u}={p}" for u, p in _mirrors(tmp).items()]
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "pin-offline-sources.py"), str(table), *mirrors],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert res.returncode == 0, res.stderr
    got = table.read_text()
    digests = re.findall(r'(?m)^sha256 = "([0-9a-f]{64})"$', got)
    full, only_src = tmp_path / "full", tmp_path / "src"
    offline.assemble(_pin(top, sub), _mirrors(tmp), full)
    offline.assemble(offline.Pin("other", "https://example.invalid/top.git", top, "OTHER_SRC_DIR", ("src",), (), ""),
                     _mirrors(tmp), only_src)
    assert digests == [offline.tree_sha256(full), offline.tree_sha256(only_src)]
    assert re.sub(r'sha256 = "[0-9a-f]*"', 'sha256 = ""', got) == text
    loaded = offline.load_table("9.9.9", table)
    assert [p.stands_in_for for p in loaded.stand_ins] == ["v2"] and loaded.unpinned[0][0] == "other"


def test_dry_run_names_every_unpinned_source_and_each_stand_in():
    """What `harness build --dry-run` prints per stack (harness.image.prefetch.source_lines): the
    shipped Spark matrix clones nine sources unchecked; its units-probe variant names the stand-in
    and what the probe patch leaves out, and nothing stays unpinned."""
    import sys

    from harness.image.prefetch import source_lines, stack_needs

    shipped = stack_needs(load_matrix(ROOT / "matrix" / "spark.toml"), "spark-121a")
    lines = source_lines(shipped)
    assert lines[0] == "1 pinned (vllm-0.33.0.toml)"
    unpinned = [x for x in lines if x.startswith("NOT pinned: ")]
    assert [x.split()[2] for x in unpinned] == ["cutlass", "flash-attention", "flashmla", "deepgemm", "deepselect",
                                                "flashkda", "tml_fa4", "fmha_sm100", "triton_kernels"]
    assert all(x.endswith(": the build clones it, unchecked") for x in unpinned)
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import defaults_probe
    finally:
        sys.path.remove(str(ROOT / "tools"))
    probe = stack_needs(load_matrix(defaults_probe.variant(ROOT / "matrix" / "spark.toml", "amd64", units=True)),
                        "spark-121a")
    assert source_lines(probe) == [
        "1 pinned (vllm-0.33.0.toml)", "stand-in: cutlass @ dcf215af68a2 for v4.7.1",
        "left out by a patch: deepgemm, deepselect, flash-attention, flashkda, flashmla, fmha_sm100, tml_fa4, "
        "triton_kernels"]
