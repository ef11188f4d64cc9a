"""Bundles and wheel stacks for one CPU platform: made for this host's (or --platform, or the
spec's `platform`), recorded in bundle.json and wheels.lock, and refused, named, on another CPU;
no wheel tagged for another CPU is ever unpacked into a site, with or without pip.

The wheels are tiny ones made here with real platform tags (manylinux_2_17_aarch64,
manylinux_2_17_x86_64, py3-none-any); their .so members are bytes, not programs: every check
reads the tag, as pip does."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from support.builds import one

from harness import bundle, platforms
from harness.cli import main
from harness.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
HOST = platforms.host()
OTHER = next(p for p in platforms.KNOWN if p != HOST)
ABI = f"cp{sys.version_info.major}{sys.version_info.minor}"  # pip installs only what this Python takes


def tagged_wheel(dest: Path, name: str, version: str, plat: str, abi: str = ABI) -> Path:
    """A wheel for one platform tag (`any` for a pure one), with a .so member when it is not pure."""
    tag = f"py3-none-{plat}" if plat == "any" else f"{abi}-{abi}-{plat}"
    path = dest / f"{name}-{version}-{tag}.whl"
    di = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "X = 1\n"}
    if plat != "any":
        files[f"{name}/_native.{abi}-{plat}.so"] = "\x7fELF" + "\0" * 60
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{di}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{di}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: {str(plat == 'any').lower()}\nTag: {tag}\n")
        z.writestr(f"{di}/RECORD", "\n".join([*files, f"{di}/METADATA", f"{di}/WHEEL", f"{di}/RECORD"]) + "\n")
    return path


def cpu_tag(p: platforms.Platform) -> str:
    return f"manylinux_2_17_{p.machine}"


def spec_file(tmp_path: Path, body: str = "") -> Path:
    p = tmp_path / "b.toml"
    p.write_text('name = "t"\nrequirements = ["fastthing==1.0", "purething==2.0"]\n' + body)
    return p


@pytest.fixture
def downloaded(tmp_path) -> Path:
    """The two wheels, for both CPUs, as `pip download` would leave them for each."""
    d = tmp_path / "dl"
    d.mkdir()
    tagged_wheel(d, "purething", "2.0", "any")
    return d


def for_cpu(downloaded: Path, p: platforms.Platform) -> Path:
    d = downloaded.parent / f"dl-{p.short}"
    d.mkdir(exist_ok=True)
    for w in downloaded.glob("*.whl"):
        (d / w.name).write_bytes(w.read_bytes())
    tagged_wheel(d, "fastthing", "1.0", cpu_tag(p))
    return d


def no_pip_python(tmp_path: Path) -> str:
    """A Python with no pip (a venv made --without-pip): install_site then unpacks the wheels."""
    env = tmp_path / "nopip"
    venv.EnvBuilder(with_pip=False).create(env)
    py = str(env / "bin" / "python")
    assert subprocess.run([py, "-m", "pip", "--version"], capture_output=True).returncode != 0
    return py


# --- make ----------------------------------------------------------------------------------------


def test_a_bundle_is_made_for_this_host_by_default_and_records_it(tmp_path, downloaded):
    manifest = bundle.make(spec_file(tmp_path), tmp_path / "out", downloaded=for_cpu(downloaded, HOST))
    assert manifest.platform == HOST.docker and manifest.lock.platform == HOST.docker
    on_disk = json.loads((tmp_path / "out" / "bundle.json").read_text())
    assert on_disk["platform"] == HOST.docker
    assert {w.file for w in manifest.lock.wheels} == {
        f"fastthing-1.0-{ABI}-{ABI}-{cpu_tag(HOST)}.whl", "purething-2.0-py3-none-any.whl"}


@pytest.mark.parametrize("how", ["flag", "spec"])
def test_a_bundle_for_the_other_cpu(tmp_path, downloaded, how):
    body = f'platform = "{OTHER.docker}"\n' if how == "spec" else ""
    manifest = bundle.make(spec_file(tmp_path, body), tmp_path / "out", downloaded=for_cpu(downloaded, OTHER),
                           platform=OTHER if how == "flag" else None)
    assert manifest.platform == OTHER.docker
    assert any(w.file.endswith(f"_{OTHER.machine}.whl") for w in manifest.lock.wheels)


def test_a_downloaded_wheel_for_another_cpu_is_refused_by_name(tmp_path, downloaded):
    with pytest.raises(ConfigError) as exc:
        bundle.make(spec_file(tmp_path), tmp_path / "out", downloaded=for_cpu(downloaded, OTHER), platform=HOST)
    assert f"fastthing-1.0-{ABI}-{ABI}-{cpu_tag(OTHER)}.whl is built for {OTHER.machine}, not {HOST.describe()}" \
        in exc.value.message
    assert not (tmp_path / "out").exists()


def test_the_pip_download_tags_follow_the_platform(tmp_path):
    spec = bundle.load_spec(spec_file(tmp_path))
    assert bundle.wheel_tags(spec, platforms.ARM64) == platforms.ARM64.wheel_tags()
    assert all(t.endswith("_aarch64") for t in bundle.wheel_tags(spec, platforms.ARM64))


@pytest.mark.parametrize("body, flag, named", [
    ('platform = "linux/amd64"\n', platforms.ARM64,
     "b.toml: platform is linux/amd64 (x86_64); --platform asks for linux/arm64 (aarch64)"),
    ('platform = "linux/riscv64"\n', None, "b.toml: platform: unknown platform 'linux/riscv64'"),
    ('platforms = ["manylinux_2_28_x86_64"]\n', platforms.ARM64,
     "b.toml: platforms[0] 'manylinux_2_28_x86_64' is not a tag for linux/arm64 (aarch64)"),
])
def test_a_spec_that_contradicts_its_platform_is_bad_input_named(tmp_path, downloaded, body, flag, named):
    with pytest.raises(ConfigError) as exc:
        bundle.make(spec_file(tmp_path, body), tmp_path / "out", downloaded=downloaded, platform=flag)
    assert named in exc.value.message and exc.value.exit_code == 2


def test_the_shipped_h200_specs_name_the_h200_machines_cpu():
    for spec in sorted((ROOT / "bundles").glob("*.toml")):
        assert bundle.load_spec(spec).platform == "linux/amd64", spec.name


# --- install -------------------------------------------------------------------------------------


def made_for(tmp_path: Path, downloaded: Path, p: platforms.Platform) -> Path:
    out = tmp_path / f"bundle-{p.short}"
    bundle.make(spec_file(tmp_path), out, downloaded=for_cpu(downloaded, p), platform=p)
    return out


def test_install_refuses_a_bundle_made_for_another_cpu_naming_both(tmp_path, downloaded, capsys):
    out = made_for(tmp_path, downloaded, OTHER)
    dest = tmp_path / "wh"
    assert main(["bundle", "install", str(out), "--dest", str(dest)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"bundle.json: made for {OTHER.describe()}; this is {HOST.describe()}" in err
    assert f"--platform {HOST.docker}" in err
    assert not dest.exists()  # refused before anything was unpacked
    # unpacked for the image build of that CPU, it is what it says
    assert main(["bundle", "install", str(out), "--dest", str(dest), "--platform", OTHER.docker]) == 0
    assert f"2 wheels for {OTHER.docker}" in capsys.readouterr().out


def test_a_bundle_without_a_recorded_platform_is_judged_by_its_wheels(tmp_path, downloaded):
    """A bundle made before platforms were recorded: its wheels' tags still decide."""
    out = made_for(tmp_path, downloaded, OTHER)
    manifest = json.loads((out / "bundle.json").read_text())
    del manifest["platform"], manifest["lock"]["platform"]
    (out / "bundle.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError) as exc:
        bundle.unpack(out, tmp_path / "wh", HOST)
    assert f"1 wheel(s) for another CPU: fastthing-1.0-{ABI}-{ABI}-{cpu_tag(OTHER)}.whl is built for " \
           f"{OTHER.machine}" in exc.value.message


@pytest.mark.parametrize("pip", [True, False], ids=["pip", "no-pip"])
def test_install_into_a_site_for_this_cpu(tmp_path, downloaded, pip, capsys):
    out = made_for(tmp_path, downloaded, HOST)
    py = sys.executable if pip else no_pip_python(tmp_path)
    site = tmp_path / "site"
    assert main(["bundle", "install", str(out), "--dest", str(tmp_path / "wh"), "--site", str(site),
                 "--python", py]) == 0
    assert "installed 2 wheels into" in capsys.readouterr().out
    assert (site / "fastthing" / f"_native.{ABI}-{cpu_tag(HOST)}.so").is_file()
    assert (site / "purething" / "__init__.py").is_file()


@pytest.mark.parametrize("pip", [True, False], ids=["pip", "no-pip"])
def test_no_wheel_for_another_cpu_reaches_a_site(tmp_path, downloaded, pip, capsys):
    """The case seen on an arm64 host: without pip, "installed 2 wheels" and x86_64 .so files left
    behind. Here the other way round (this host is the one the bundle is not for)."""
    out = made_for(tmp_path, downloaded, OTHER)
    wh = tmp_path / "wh"
    bundle.unpack(out, wh, OTHER)  # the wheelhouse as an image build of that CPU would take it
    py = sys.executable if pip else no_pip_python(tmp_path)
    site = tmp_path / "site"
    with pytest.raises(ConfigError) as exc:
        bundle.install_site(wh, site, python=py)
    assert f"wheels.lock: made for {OTHER.describe()}; this is {HOST.describe()}" in exc.value.message
    assert not site.exists() or not any(site.rglob("*"))
    # and through the command: exit 2, no "installed" line
    assert main(["bundle", "install", str(out), "--dest", str(tmp_path / "wh2"), "--platform", OTHER.docker,
                 "--site", str(site), "--python", py]) == 2
    captured = capsys.readouterr()
    assert "installed" not in captured.out and f"made for {OTHER.describe()}" in " ".join(captured.err.split())
    assert not any(site.rglob("*.so"))


# --- wheel stacks ----------------------------------------------------------------------------------


def test_the_in_image_install_refuses_a_wheel_for_another_cpu(tmp_path, downloaded):
    """docker/wheels.py, as an image build runs it (standard library only, no pip in the base):
    it stops before unpacking anything when a wheel is tagged for another CPU than its Python's."""
    out = made_for(tmp_path, downloaded, OTHER)
    wh = tmp_path / "wh"
    bundle.unpack(out, wh, OTHER)
    py = no_pip_python(tmp_path)
    site_before = sorted(p.name for p in Path(subprocess.check_output(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()).iterdir())
    r = subprocess.run([py, str(ROOT / "docker" / "wheels.py"), "install", "--python", py, "--vllm", "1.0",
                        "--wheelhouse", str(wh)], capture_output=True, text=True)
    assert r.returncode == 1
    assert (f"this image's Python runs on {HOST.machine}; the wheelhouse ({OTHER.docker}) holds wheels for "
            f"another CPU: fastthing-1.0-{ABI}-{ABI}-{cpu_tag(OTHER)}.whl is built for {OTHER.machine}") in r.stdout
    site = Path(subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    assert sorted(p.name for p in site.iterdir()) == site_before


def test_a_wheel_stack_build_refuses_a_wheelhouse_for_another_cpu(tmp_path):
    """The image is built for this host's CPU (by default): its wheelhouse is checked at render,
    before any build step, and named by its key."""
    from test_wheel_stack import wheel_matrix

    from harness.image.wheels import render_wheels
    from harness.matrix.load import load_matrix

    dl = tmp_path / "dl"
    dl.mkdir()
    tagged_wheel(dl, "vllm", "0.25.1", cpu_tag(OTHER))
    (tmp_path / "b.toml").write_text('name = "v"\nrequirements = ["vllm==0.25.1"]\n')
    manifest = bundle.make(tmp_path / "b.toml", tmp_path / "out", downloaded=dl, platform=OTHER)
    wh = tmp_path / "wh"
    bundle.unpack(tmp_path / "out", wh, OTHER)
    m = load_matrix(wheel_matrix(tmp_path, wh, manifest.lock.wheels[0].sha256))
    with pytest.raises(ConfigError) as exc:
        render_wheels(one(m, "w", base_image_id="sha256:" + "a" * 64))
    assert f"stacks.w.wheels.wheelhouse {wh}/wheels.lock: made for {OTHER.describe()}; this is " \
           f"{HOST.describe()}" in exc.value.message
    assert render_wheels(one(m, "w", base_image_id="sha256:" + "a" * 64, platform=OTHER)).files  # for that CPU: fine


@pytest.mark.parametrize("pip", [True, False], ids=["pip", "no-pip"])
def test_a_wheel_for_another_python_is_refused_before_anything_is_installed(tmp_path, pip):
    """Without pip, unpacking a cp3(N+1) wheel into a 3.N site would "install" what cannot import."""
    newer = f"cp{sys.version_info.major}{sys.version_info.minor + 1}"
    dl = tmp_path / "dl"
    dl.mkdir()
    tagged_wheel(dl, "fastthing", "1.0", cpu_tag(HOST), abi=newer)
    tagged_wheel(dl, "purething", "2.0", "any")
    bundle.make(spec_file(tmp_path), tmp_path / "out", downloaded=dl)
    bundle.unpack(tmp_path / "out", tmp_path / "wh")
    py = sys.executable if pip else no_pip_python(tmp_path)
    site = tmp_path / "site"
    with pytest.raises(ConfigError) as exc:
        bundle.install_site(tmp_path / "wh", site, python=py)
    assert (f"1 wheel(s) it cannot import: fastthing-1.0-{newer}-{newer}-{cpu_tag(HOST)}.whl is for "
            f"{newer}-{newer}, not CPython {sys.version_info.major}.{sys.version_info.minor}") in exc.value.message
    assert not site.exists() or not any(site.iterdir())


def test_a_download_folder_for_both_cpus_gives_each_bundle_its_own(tmp_path, downloaded):
    both = for_cpu(downloaded, OTHER)
    tagged_wheel(both, "fastthing", "1.0", cpu_tag(HOST))
    for p in (HOST, OTHER):
        lock = bundle.make(spec_file(tmp_path), tmp_path / p.short, downloaded=both, platform=p).lock
        assert sorted(w.file for w in lock.wheels) == [
            f"fastthing-1.0-{ABI}-{ABI}-{cpu_tag(p)}.whl", "purething-2.0-py3-none-any.whl"]


# --- the air-gap tools -----------------------------------------------------------------------------


@pytest.mark.parametrize("args, env, named", [
    ([], {"PLATFORM": "sparc"}, "device-inputs: PLATFORM: unknown platform 'sparc'"),
    (["--platform", OTHER.docker], {}, f"device-inputs: the Docker kit is made from this host's packages "
                                       f"({HOST.docker}), not {OTHER.docker}"),
])
def test_device_inputs_refuses_a_platform_it_cannot_serve_before_downloading(tmp_path, args, env, named):
    import os

    out = tmp_path / "inputs"
    r = subprocess.run(["bash", str(ROOT / "tools" / "device-inputs.sh"), *args, str(out)], capture_output=True,
                       text=True, env={**os.environ, "PY": sys.executable, **env})
    assert r.returncode == 2 and named in r.stderr
    assert not out.exists()  # nothing made, nothing downloaded
