"""Wheel stacks and the bundle that carries them, without an engine: make/install round trip,
the checks on every path in, and the rendering (same family, tag and labels as source stacks)."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
from support.builds import one

from harness import bundle, platforms
from harness.errors import ConfigError, HarnessError
from harness.image.builder import unpinned
from harness.image.dockerfile import render
from harness.image.preflight import preflight_stack
from harness.image.stackbuild import resolve
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
PATCH = ROOT / "patches" / "wheel" / "vllm-0.25.1-flash-attn-optional.patch"
# the lines of vllm 0.25.1's vllm/vllm_flash_attn/__init__.py (cu130 wheel) around the guard the
# patch turns off: lines 28-38, preceded by filler so the hunk's line numbers hold
GUARD = (["# filler"] * 27 + [
    "    get_scheduler_metadata,",
    "    is_fa_version_supported,",
    ")",
    "",
    "if not (FA2_AVAILABLE or FA3_AVAILABLE):",
    "    raise ImportError(",
    '        "vllm.vllm_flash_attn requires the CUDA flash attention extensions "',
    '        "(_vllm_fa2_C or _vllm_fa3_C). On ROCm, use upstream flash_attn."',
    "    )",
    "",
    "__all__ = [",
])


def wheel(dest: Path, name: str, version: str, files: dict[str, str]) -> Path:
    path = dest / f"{name}-{version}-py3-none-any.whl"
    di = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{di}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{di}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{di}/RECORD", "\n".join([*files, f"{di}/METADATA", f"{di}/WHEEL", f"{di}/RECORD"]) + "\n")
    return path


@pytest.fixture
def downloaded(tmp_path) -> Path:
    d = tmp_path / "dl"
    d.mkdir()
    wheel(d, "vllm", "0.25.1", {"vllm/__init__.py": "", "vllm/vllm_flash_attn/__init__.py": "\n".join(GUARD) + "\n",
                                "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": "x" * 5000})
    wheel(d, "tinydep", "1.0", {"tinydep/__init__.py": "X = 1\n"})
    return d


def spec_file(tmp_path: Path, body: str = "") -> Path:
    p = tmp_path / "b.toml"
    p.write_text('name = "t"\nrequirements = ["vllm==0.25.1", "tinydep==1.0"]\npart_size_mb = 0.001\n'
                 '[[strip]]\nwheel = "vllm"\npaths = ["vllm/vllm_flash_attn/*.so"]\nreason = "too large"\n' + body)
    return p


@pytest.fixture
def made(tmp_path, downloaded) -> tuple[Path, bundle.BundleManifest]:
    out = tmp_path / "bundle"
    return out, bundle.make(spec_file(tmp_path), out, downloaded=downloaded)


def test_bundle_round_trip(tmp_path, made):
    out, manifest = made
    parts = sorted(out.glob("part_*"))
    assert len(parts) == len(manifest.parts) >= 2
    assert all(p.stat().st_size <= 1000 for p in parts)
    lock = {w.name: w for w in manifest.lock.wheels}
    assert lock["vllm"].repacked and lock["vllm"].stripped == ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",)
    assert lock["vllm"].sha256 != lock["vllm"].upstream_sha256
    assert not lock["tinydep"].repacked and lock["tinydep"].sha256 == lock["tinydep"].upstream_sha256
    # bundle.json holds the keys it always did (a wheel that was not re-packed has no strip keys)
    doc = json.loads((out / "bundle.json").read_text())
    assert sorted(doc) == ["archive_bytes", "archive_sha256", "bundle", "description", "format", "lock", "part_size_limit_bytes",
                           "parts", "platform"]
    assert sorted(doc["lock"]) == ["bundle", "platform", "python_version", "wheels"]
    assert {w["name"]: sorted(w) for w in doc["lock"]["wheels"]} == {
        "vllm": ["file", "name", "repacked", "sha256", "strip_reason", "stripped", "upstream_sha256", "version"],
        "tinydep": ["file", "name", "repacked", "sha256", "upstream_sha256", "version"]}
    assert bundle.read_manifest(out) == manifest and bundle.read_manifest(out).as_text() == (out / "bundle.json").read_text()
    dest = tmp_path / "wh"
    bundle.unpack(out, dest)
    with zipfile.ZipFile(dest / lock["vllm"].file) as z:
        names = z.namelist()
        record = z.read("vllm-0.25.1.dist-info/RECORD").decode()
    assert "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" not in names and "_vllm_fa2_C" not in record
    site = tmp_path / "site"
    bundle.install_site(dest, site, python=sys.executable)  # pip, --no-index --no-deps
    assert (site / "tinydep" / "__init__.py").read_text() == "X = 1\n"
    assert (site / "vllm" / "vllm_flash_attn" / "__init__.py").is_file()
    with pytest.raises(ConfigError, match="no such interpreter"):
        bundle.install_site(dest, site, python="/nonexistent/python3")


def test_a_damaged_part_is_named(made):
    out, manifest = made
    part = out / manifest.parts[0].file
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(HarnessError, match=f"{part.name}: sha256"):
        bundle.check_parts(out)


def test_a_missing_part_is_named(made):
    out, manifest = made
    (out / manifest.parts[-1].file).unlink()
    with pytest.raises(ConfigError, match="is missing"):
        bundle.check_parts(out)


def test_a_changed_wheel_fails_the_lock(tmp_path, made):
    out, _ = made
    dest = tmp_path / "wh"
    bundle.unpack(out, dest)
    victim = next(dest.glob("tinydep-*.whl"))
    victim.write_bytes(victim.read_bytes() + b"\0")
    with pytest.raises(HarnessError, match="not the lock's"):
        bundle.check_lock(dest)


def test_spec_errors_name_the_key(tmp_path, downloaded):
    p = tmp_path / "bad.toml"
    p.write_text('name = "t"\nrequirements = ["vllm>=0.25"]\n')
    with pytest.raises(ConfigError, match="exact pins"):
        bundle.load_spec(p)
    p.write_text('name = "t"\nrequirements = ["vllm==0.25.1"]\npart_size = 3\n')
    with pytest.raises(ConfigError, match="part_size"):
        bundle.load_spec(p)
    with pytest.raises(HarnessError, match="matched nothing"):
        bundle.make(spec_file(tmp_path, '[[strip]]\nwheel = "tinydep"\npaths = ["nope/*"]\nreason = "r"\n'),
                    tmp_path / "o", downloaded=downloaded)


# --- the matrix side ------------------------------------------------------------------------------


def wheel_matrix(tmp_path: Path, wheelhouse: Path, sha: str, extra: str = "", patches: str = "") -> Path:
    (tmp_path / "patches" / "wheel").mkdir(parents=True, exist_ok=True)
    (tmp_path / "patches" / "wheel" / PATCH.name).write_bytes(PATCH.read_bytes())
    p = tmp_path / "m.toml"
    p.write_text(f"""
[matrix]
name = "t"
hardware = "h"
patches_dir = "patches"
[hardware.h]
cc = "9.0"
bandwidth_gbs = 4800
memory_gib = 141
[stacks.w]
base_image = {{ repository = "base", tag = "local", local = true {extra} }}
torch = {{ version = "2.11.0" }}
[stacks.w.wheels]
wheelhouse = "{wheelhouse}"
python = "/opt/venv/bin/python3"
vllm = {{ version = "0.25.1", sha256 = "{sha}" }}
patches = [{patches or '"wheel/' + PATCH.name + '"'}]
[models.m]
checkpoint = "x/y"
quantization = "fp8"
active_params_b = 1
bytes_per_param = 1
[configs.auto]
""")
    return p


@pytest.fixture
def wheelhouse(tmp_path, made) -> tuple[Path, str]:
    out, manifest = made
    dest = tmp_path / "wh"
    bundle.unpack(out, dest)
    return dest, next(w.sha256 for w in manifest.lock.wheels if w.name == "vllm")


ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64


def test_wheel_stack_renders_with_pins_labels_and_tag(tmp_path, wheelhouse):
    wh, sha = wheelhouse
    m = load_matrix(wheel_matrix(tmp_path, wh, sha))
    r = render(one(m, "w", base_image_id=ID_A))
    assert r.buildargs["BASE_IMAGE"] == ID_A and r.buildargs["VLLM_WHEEL_SHA256"] == sha
    assert "COPY wheelhouse/ /opt/build/wheelhouse/" in r.dockerfile and "@" not in r.dockerfile.replace("@{", "")
    files = dict(r.files)
    assert "wheels.py" in files and "wheelhouse/wheels.lock" in files
    assert any(k.startswith("wheelhouse/vllm-0.25.1") for k in files)
    assert r.labels["harness.base-image-id"] == ID_A
    assert f"sha256:{sha}" in r.labels["harness.vllm.source"] and "re-packed from upstream" in r.labels["harness.vllm.source"]
    assert r.labels[f"harness.vllm.patch.{PATCH.name}.sha256"]
    assert r.image_ref == f"vllm-bw:w-{platforms.host().short}-{r.content_hash[:12]}"
    # the base's image ID is part of the tag: another base, another image
    assert render(one(m, "w", base_image_id=ID_B)).content_hash != r.content_hash
    # a local base is not 'unpinned'
    assert unpinned(resolve(m, ["w"])) == []


def test_pinned_image_id_must_match(tmp_path, wheelhouse):
    wh, sha = wheelhouse
    m = load_matrix(wheel_matrix(tmp_path, wh, sha, extra=f', image_id = "{ID_A}"'))
    render(one(m, "w", base_image_id=ID_A))
    with pytest.raises(ConfigError, match="the local tag moved"):
        render(one(m, "w", base_image_id=ID_B))


def test_vllm_pin_must_be_the_wheelhouse_wheel(tmp_path, wheelhouse):
    wh, _ = wheelhouse
    m = load_matrix(wheel_matrix(tmp_path, wh, "0" * 64))
    with pytest.raises(ConfigError, match="re-packed wheel: its own sha256 is in wheels.lock"):
        render(one(m, "w", base_image_id=ID_A))


def test_a_patch_outside_python_files_is_refused(tmp_path, wheelhouse):
    wh, sha = wheelhouse
    (tmp_path / "patches" / "wheel").mkdir(parents=True, exist_ok=True)
    (tmp_path / "patches" / "wheel" / "k.patch").write_text("--- a/csrc/x.cu\n+++ b/csrc/x.cu\n@@ -1 +1 @@\n-a\n+b\n")
    m = load_matrix(wheel_matrix(tmp_path, wh, sha, patches='"wheel/k.patch"'))
    with pytest.raises(ConfigError, match="Python files only.*csrc/x.cu"):
        render(one(m, "w", base_image_id=ID_A))


def test_missing_wheelhouse_says_how_to_make_it(tmp_path):
    m = load_matrix(wheel_matrix(tmp_path, tmp_path / "nowhere", "0" * 64))
    with pytest.raises(ConfigError, match="harness bundle install"):
        render(one(m, "w", base_image_id=ID_A))


def test_preflight_checks_the_patch_against_the_wheel(tmp_path, wheelhouse):
    wh, sha = wheelhouse
    m = load_matrix(wheel_matrix(tmp_path, wh, sha))
    [series] = preflight_stack(one(m, "w"))
    assert series.ok and [p.name for p in series.patches] == [PATCH.name]
    # the same patch against a wheel whose guard reads differently: named, with the file
    bad = tmp_path / "patches" / "wheel" / "bad.patch"
    bad.write_text(PATCH.read_text().replace("-if not (FA2_AVAILABLE or FA3_AVAILABLE):", "-if not FA2_AVAILABLE:"))
    m2 = load_matrix(wheel_matrix(tmp_path, wh, sha, patches='"wheel/bad.patch"'))
    [series] = preflight_stack(one(m2, "w"))
    assert not series.ok and "vllm/vllm_flash_attn/__init__.py" in " ".join(series.problems())


def test_the_shipped_h200_docker_matrix_loads():
    m = load_matrix(ROOT / "matrix" / "h200-docker.toml")
    w = m.spec.stacks["docker-0251"]
    assert w.wheels.vllm.sha256 and w.base_image.local and m.spec.host.gpu_attach == "devices"
    assert m.spec.host.security_opt == ("seccomp=unconfined",)
    lock_note = json.loads((ROOT / "examples" / "h200-docker" / "device" / "3-image.json").read_text())[0]
    assert w.wheels.vllm.sha256 in lock_note["Config"]["Labels"]["harness.vllm.source"]
