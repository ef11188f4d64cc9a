"""`harness bundle make|install`: carry a wheel stack to a host with no package index.

`make` reads a bundle spec (TOML: the pinned requirements, the target platform, what to strip
and why), downloads the wheels with pip for one CPU platform (`--platform`, else the spec's
`platform` key, else this host's: harness/platforms.py), re-packs a wheel only where the spec
strips files from it (the re-packed wheel gets its own sha256, and the lock says what was
removed and why),
writes `wheels.lock` beside the wheels, then packs the wheelhouse as one tar.xz split into parts
no larger than the spec's limit, each with its sha256 in `bundle.json`.

`install` refuses a bundle made for another CPU than the one it unpacks for (this host's, or
`--platform`), checks every part and the whole archive against `bundle.json`, unpacks the
wheelhouse, checks every wheel against `wheels.lock` and, by the platform tag in its name,
against that CPU, and can install the wheels into a folder (`--site`, for a local runner) with
no index: pip with `--no-index --no-deps`, or, where the Python has no pip, by unpacking each
wheel (what pip does for a pure-path install). Every wheel is checked against the CPU of that
Python before the first is installed, and each is found installed afterwards.

A wheel stack in a matrix names the wheelhouse folder; the image build reads `wheels.lock`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import lzma
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness import platforms, proc
from harness.errors import ConfigError, HarnessError
from harness.safety import grammar, numbers, paths, writes
from harness.safety.readers import extract_flat_tar_xz, load_json, load_toml
from harness.safety.roots import Root
from harness.safety.wheels import repack_wheel, unpack_wheel

LOCK = "wheels.lock"
# bounds on the commands a bundle runs (a wheelhouse may be gigabytes, on a slow link)
DOWNLOAD_TIMEOUT_S = 3600
PACK_TIMEOUT_S = 3600
INSTALL_TIMEOUT_S = 1800
MANIFEST = "bundle.json"
PART = "part_{:02d}"
MAX_PARTS = 10_000  # part_0000 to part_9999 (harness.safety.grammar "part")
WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Strip(_Strict):
    wheel: str = Field(description="Distribution name of the wheel to re-pack (e.g. 'vllm').")
    paths: tuple[str, ...] = Field(description="Globs of archive members to drop (fnmatch, '*' crosses '/').")
    reason: str = Field(description="Why: written into the lock and the stack's report.")


class BundleSpec(_Strict):
    name: str = Field(description="Bundle name, used in file names and the manifest.")
    description: str = Field("", description="What this bundle carries, and to which host.")
    requirements: tuple[str, ...] = Field(description="Pinned requirements, 'name==version' each.")
    python_version: str = Field("3.12", description="Target Python (pip download --python-version).")
    implementation: str = Field("cp", description="pip download --implementation.")
    platform: str | None = Field(None, description="The CPU platform the bundle is for (linux/amd64 or "
                                 "linux/arm64); absent: this host's, or `bundle make --platform`.")
    platforms: tuple[str, ...] | None = Field(None, description="pip download --platform tags; absent: "
                                              "the manylinux tags of `platform` (harness/platforms.py).")
    part_size_mb: float = Field(60, ge=0.001, le=1_000_000, allow_inf_nan=False,
                                description="Largest part, in MB (10^6 bytes): 0.001 (1000 bytes) to 1000000.")
    xz_preset: int = Field(6, ge=0, le=9, description="xz compression preset.")
    strip: tuple[Strip, ...] = Field((), description="Files removed from wheels, with the reason.")


def load_spec(path: Path) -> BundleSpec:
    data = load_toml(path, what="bundle spec", hint="check the path and TOML syntax")
    try:
        spec = BundleSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path}: {problems}", hint="fix those keys (see harness/bundle.py BundleSpec)") from None
    grammar.check("bundle_name", spec.name, where=f"{path}: name")
    if spec.platform is not None:
        platforms.parse(spec.platform, where=f"{path}: platform")
    # every value below becomes an argument of `pip download`: none may read as an option
    for i, plat in enumerate(spec.platforms or ()):
        if not re.fullmatch(r"[A-Za-z0-9_.]{1,64}", plat):
            raise ConfigError(f"{path}: platforms[{i}] {plat!r} is not a platform tag", hint="e.g. manylinux_2_28_x86_64")
    if not re.fullmatch(r"\d(?:\.\d{1,2})?", spec.python_version):
        raise ConfigError(f"{path}: python_version {spec.python_version!r} is not a version", hint="e.g. '3.12'")
    if not re.fullmatch(r"[a-z]{2}", spec.implementation):
        raise ConfigError(f"{path}: implementation {spec.implementation!r} is not one", hint="'cp', 'pp' or 'py'")
    bad = [r for r in spec.requirements if not re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-!]+", r)]
    if bad:
        raise ConfigError(f"{path}: requirements must be exact pins 'name==version', not {', '.join(bad)}",
                          hint="pin every package (resolve once with pip, then copy `pip freeze`)")
    return spec


def target_platform(spec: BundleSpec, spec_path: Path, given: platforms.Platform | None = None) -> platforms.Platform:
    """The platform a bundle is made for: `--platform`, else the spec's `platform`, else this
    host's. A `--platform` the spec contradicts, or a spec tag for another CPU, is bad input."""
    own = platforms.parse(spec.platform, where=f"{spec_path}: platform") if spec.platform else None
    if given is not None and own is not None and given != own:
        raise ConfigError(f"{spec_path}: platform is {own.describe()}; --platform asks for {given.describe()}",
                          hint="drop --platform to make the bundle the spec describes, or write a spec for "
                               f"{given.docker} (its pins may differ per CPU)")
    target = given or own or platforms.host()
    for i, tag in enumerate(spec.platforms or ()):
        if not target.takes_wheel(f"x-0-py3-none-{tag}.whl"):
            raise ConfigError(f"{spec_path}: platforms[{i}] {tag!r} is not a tag for {target.describe()}",
                              hint="remove `platforms` (the tags then follow the platform) or list tags "
                                   f"ending in _{target.machine}")
    return target


def wheel_tags(spec: BundleSpec, target: platforms.Platform) -> tuple[str, ...]:
    return spec.platforms or target.wheel_tags()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with paths.open_regular(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_name_version(filename: str) -> tuple[str, str]:
    m = WHEEL_NAME.fullmatch(filename)
    if not m:
        raise HarnessError(f"{filename}: not a wheel file name")
    return norm(m["name"]), m["version"]


# --- make ---------------------------------------------------------------------------------------


def download(spec: BundleSpec, dest: Path, target: platforms.Platform, python: str = sys.executable) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", spec.python_version, "--implementation", spec.implementation,
           *[a for p in wheel_tags(spec, target) for a in ("--platform", p)], "-d", str(dest), *spec.requirements]
    r = proc.run(cmd, timeout=DOWNLOAD_TIMEOUT_S)
    if r.returncode != 0:
        raise HarnessError(f"pip download failed: {r.stderr.strip()[-2000:]}",
                           hint="check the pins and the platform tags in the bundle spec")


def repack(src: Path, dest: Path, globs: tuple[str, ...]) -> list[str]:
    """Copy wheel `src` to `dest` without the members matching `globs` (fnmatch, '*' crosses
    '/'); RECORD follows (harness.safety.wheels: bounded, never written through a link).
    Returns the removed members."""
    return repack_wheel(src, dest, lambda name: any(fnmatch.fnmatchcase(name, g) for g in globs))


def make_wheelhouse(spec: BundleSpec, downloaded: Path, wheelhouse: Path, target: platforms.Platform) -> WheelLock:
    """The wheelhouse folder (re-packed where the spec strips) and its lock. Wheels
    built for another CPU than `target` are left out; a requirement with only such wheels is
    refused, naming them."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    wanted = {norm(r.split("==")[0]): r.split("==")[1] for r in spec.requirements}
    strips = {norm(s.wheel): s for s in spec.strip}
    unknown = sorted(set(strips) - set(wanted))
    if unknown:
        raise ConfigError(f"bundle {spec.name}: strip names wheels not in requirements: {', '.join(unknown)}",
                          hint="strip only wheels the bundle carries")
    entries = []
    seen = set()
    foreign: dict[str, list[str]] = {}
    for whl in [downloaded / n for n in Root(downloaded, what="pip download folder").files(suffix=".whl")]:
        name, version = wheel_name_version(whl.name)
        if name not in wanted:
            continue
        if why := platforms.wheel_refusal(whl.name, target):
            foreign.setdefault(name, []).append(why)
            continue
        seen.add(name)
        upstream = sha256_file(whl)
        entry: dict[str, object] = {"name": name, "version": version, "file": whl.name, "upstream_sha256": upstream}
        if name in strips:
            removed = repack(whl, wheelhouse / whl.name, strips[name].paths)
            if not removed:
                raise HarnessError(f"bundle {spec.name}: strip globs for {name} matched nothing",
                                   hint="fix strip.paths (wheel member paths, e.g. 'vllm/vllm_flash_attn/*.so')")
            entry.update(repacked=True, stripped=removed, strip_reason=strips[name].reason)
        else:
            Root(wheelhouse, what="wheelhouse").copy_in(Root(downloaded, what="pip download folder"), whl.name)
            entry.update(repacked=False)
        entry["sha256"] = sha256_file(wheelhouse / whl.name)
        entries.append(LockedWheel.model_validate(entry))
    if wrong := [why for name in sorted(set(foreign) - seen) for why in foreign[name]]:
        raise ConfigError(f"bundle {spec.name}: in {downloaded}: " + "; ".join(wrong[:5]),
                          hint=f"download the {target.machine} wheels (or pure ones), or make the bundle for "
                               "their platform (--platform)")
    missing = sorted(set(wanted) - seen)
    if missing:
        raise HarnessError(f"bundle {spec.name}: no wheel downloaded for {', '.join(missing)}")
    lock = WheelLock(bundle=spec.name, python_version=spec.python_version, platform=target.docker,
                     wheels=tuple(entries))
    writes.write_text(wheelhouse / LOCK, lock.as_text(), flag="wheel lock")
    return lock


def pack(wheelhouse: Path, out: Path, spec: BundleSpec, target: platforms.Platform) -> BundleManifest:
    """wheelhouse -> out/part_NN (each <= part size) + out/bundle.json."""
    out.mkdir(parents=True, exist_ok=True)
    for old in Root(out, what="--out").files():  # a link named part_* is not listed: writing over it is refused
        if old.startswith("part_"):
            writes.remove_file(out / old, flag="--out part")
    limit = int(spec.part_size_mb * 1_000_000)
    archive = writes.check_target(out / f".{spec.name}.tar.xz", "--out archive")
    xz = shutil.which("xz")
    files = Root(wheelhouse, what="wheelhouse").files()
    if xz and shutil.which("tar"):  # multi-threaded xz where there is one; same format as lzma's
        # tar runs xz itself (one command, one process group: a timeout or Ctrl-C ends both)
        r = proc.run(["tar", "-C", str(wheelhouse), "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                      f"--use-compress-program={xz} -T0 -{spec.xz_preset}", "-cf", str(archive), "--", *files],
                     timeout=PACK_TIMEOUT_S)
        if r.returncode != 0:
            raise HarnessError(f"packing the wheelhouse failed (tar with xz): {r.stderr.strip()[-2000:]}")
    else:
        with (writes.open_new(archive, flag="--out archive", binary=True) as fw,
              lzma.LZMAFile(fw, "wb", preset=spec.xz_preset) as xw, tarfile.open(fileobj=xw, mode="w") as t):
            for name in files:
                info = t.gettarinfo(str(wheelhouse / name), arcname=name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with paths.open_regular(wheelhouse / name, what="wheel") as fh:
                    t.addfile(info, fh)
    parts = []
    size = archive.stat().st_size
    if -(-size // limit) > MAX_PARTS:  # checked before a part is written: never a bundle cut short
        writes.remove_file(archive, flag="--out archive")
        raise ConfigError(f"part_size_mb = {spec.part_size_mb:g}: the archive ({size} bytes) would need more than "
                          f"{MAX_PARTS} parts", hint=f"raise part_size_mb to at least {size / MAX_PARTS / 1e6:.3f}")
    with paths.open_regular(archive, what="--out archive") as f:
        for i in range(MAX_PARTS):
            chunk = f.read(limit)
            if not chunk:
                break
            p = out / PART.format(i)
            writes.write_bytes(p, chunk, flag="--out part")
            parts.append(BundlePart(file=p.name, bytes=len(chunk), sha256=hashlib.sha256(chunk).hexdigest()))
    manifest = BundleManifest(bundle=spec.name, description=spec.description, format="tar.xz split",
                              platform=target.docker, archive_sha256=sha256_file(archive),
                              archive_bytes=archive.stat().st_size, part_size_limit_bytes=limit, parts=tuple(parts),
                              lock=read_lock(wheelhouse))
    writes.remove_file(archive, flag="--out archive")
    writes.write_text(out / MANIFEST, manifest.as_text(), flag="--out manifest")
    return manifest


def make(spec_path: Path, out: Path, *, downloaded: Path | None = None, keep_wheelhouse: Path | None = None,
         platform: platforms.Platform | None = None) -> BundleManifest:
    spec = load_spec(spec_path)
    target = target_platform(spec, spec_path, platform)
    with tempfile.TemporaryDirectory(prefix="harness-bundle-") as tmp:
        dl = downloaded or Path(tmp) / "download"
        if downloaded is None:
            download(spec, dl, target)
        wh = keep_wheelhouse or Path(tmp) / "wheelhouse"
        make_wheelhouse(spec, dl, wh, target)
        return pack(wh, out, spec, target)


# --- install ------------------------------------------------------------------------------------


class _Written(BaseModel):
    """A file this module writes: frozen, unknown keys kept; written out, it holds the keys it was
    given (so a lock or manifest read and written again is the same JSON)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    def as_text(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_unset=True), indent=1, sort_keys=True) + "\n"


class BundlePart(_Strict):
    """One part of the split archive (bundle.json `parts`)."""

    file: str
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class LockedWheel(_Written):
    """One wheel of wheels.lock: the file, its sha256 and, for a re-packed one, what was removed."""

    name: str
    version: str
    file: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    upstream_sha256: str | None = Field(None, description="The sha256 of the wheel as downloaded.")
    repacked: bool = False
    stripped: tuple[str, ...] = Field((), description="Archive members removed (a re-packed wheel).")
    strip_reason: str = ""


class WheelLock(_Written):
    """wheels.lock, beside the wheels of a wheelhouse (and bundle.json `lock`)."""

    bundle: str | None = None
    python_version: str | None = None
    platform: str | None = None  # absent in bundles made before platforms were recorded
    wheels: tuple[LockedWheel, ...] = Field(max_length=10_000)


class BundleManifest(_Written):
    """bundle.json, beside the parts: the archive's sha256 and size, its parts, and the lock."""

    bundle: str
    description: str | None = None
    format: str | None = None
    archive_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    archive_bytes: int = Field(ge=0)
    part_size_limit_bytes: int | None = None
    platform: str | None = None
    parts: tuple[BundlePart, ...] = Field(min_length=1, max_length=10_000)
    lock: WheelLock


_Doc = TypeVar("_Doc", WheelLock, BundleManifest)


def _validated(model: type[_Doc], data: object, name: str, hint: str) -> _Doc:
    """`data` checked against `model` (types, sizes, file names): a damaged manifest or lock is
    exit 2 naming the file, never a KeyError in the middle of an install."""
    try:
        doc = model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:5])
        raise ConfigError(f"{name}: {grammar.one_line(problems)}", hint=hint) from None
    lock = doc.lock if isinstance(doc, BundleManifest) else doc
    platforms_at = [("platform", doc.platform)] + ([("lock.platform", lock.platform)] if lock is not doc else [])
    for where, value in platforms_at:
        if value is not None:
            platforms.parse(value, where=f"{name}: {where}")
    for i, w in enumerate(lock.wheels):
        grammar.check("wheel_file", w.file, where=f"{name}: wheels[{i}].file", hint=hint)
    parts: tuple[BundlePart, ...] = doc.parts if isinstance(doc, BundleManifest) else ()
    for i, p in enumerate(parts):
        grammar.check("part", p.file, where=f"{name}: parts[{i}].file", hint=hint)
    return doc


def read_manifest(bundle_dir: Path) -> BundleManifest:
    hint = "copy bundle.json beside the parts (it is written by `harness bundle make`)"

    data = load_json(bundle_dir / MANIFEST, limit=16 << 20, what="bundle manifest", hint=hint)
    return _validated(BundleManifest, data, f"{bundle_dir / MANIFEST}", hint)


def read_lock(wheelhouse: Path) -> WheelLock:
    hint = "unpack the bundle again: `harness bundle install DIR --dest FOLDER`"
    data = load_json(wheelhouse / LOCK, limit=16 << 20, what="wheel lock", hint=hint)
    return _validated(WheelLock, data, f"{wheelhouse / LOCK}", hint)



def wheelhouse_files(where: Path, lock: WheelLock) -> list[tuple[str, bytes]]:
    """The lock and every wheel it names, as build-context files (`wheelhouse/NAME`): each wheel
    read bounded from inside `where` (never outside it) and checked against the lock's sha256."""
    files = [("wheelhouse/" + LOCK, paths.read_bytes(where / LOCK, limit=16 << 20, what="wheel lock"))]
    for e in lock.wheels:
        wheel = paths.under(where, e.file, what=f"{where / LOCK}: wheel")
        data = paths.read_bytes(wheel, limit=8 << 30, what="wheel")
        if hashlib.sha256(data).hexdigest() != e.sha256:
            raise ConfigError(f"{wheel}: sha256 differs from {LOCK}",
                              hint="the wheelhouse was changed after the bundle was made: install it again")
        files.append(("wheelhouse/" + e.file, data))
    return files

def check_parts(bundle_dir: Path) -> BundleManifest:
    manifest = read_manifest(bundle_dir)
    for p in manifest.parts:
        path = paths.under(bundle_dir, p.file, what=f"{bundle_dir / MANIFEST}: part")
        if not path.is_file():
            raise ConfigError(f"{bundle_dir}: part {p.file} is missing",
                              hint=f"copy all {len(manifest.parts)} parts into {bundle_dir}")
        if (got := sha256_file(path)) != p.sha256:
            raise HarnessError(f"{path}: sha256 {got} is not the manifest's {p.sha256}",
                               hint="the part is damaged or from another bundle: copy it again")
    return manifest


def check_lock(wheelhouse: Path) -> WheelLock:
    lock = read_lock(wheelhouse)
    for w in lock.wheels:
        path = paths.under(wheelhouse, w.file, what=f"{wheelhouse / LOCK}: wheel")
        if not path.is_file():
            raise HarnessError(f"{wheelhouse}: {w.file} is missing (listed in {LOCK})")
        if (got := sha256_file(path)) != w.sha256:
            raise HarnessError(f"{path}: sha256 {got} is not the lock's {w.sha256}")
    return lock


def refuse_other_cpu(where: str, lock: WheelLock, target: platforms.Platform, made_for: str | None = None) -> None:
    """Bad input (exit 2) when a bundle or wheelhouse was made for another CPU than `target`, or
    holds a wheel whose tag names another one: named, before anything is unpacked or installed."""
    made = platforms.parse(made_for or lock.platform or target.docker, where=f"{where}: platform")
    if made != target:
        raise ConfigError(f"{where}: made for {made.describe()}; this is {target.describe()}",
                          hint=f"make the bundle for {target.docker} (`harness bundle make SPEC --platform "
                               f"{target.docker}`), or install it on a {made.machine} host")
    wrong = [why for w in lock.wheels if (why := platforms.wheel_refusal(w.file, target))]
    if wrong:
        raise ConfigError(f"{where}: {len(wrong)} wheel(s) for another CPU: " + "; ".join(wrong[:5]),
                          hint=f"make the bundle again for {target.docker}: its wheels must be pure or "
                               f"tagged _{target.machine}")


def unpack(bundle_dir: Path, dest: Path, target: platforms.Platform | None = None) -> BundleManifest:
    """Check and unpack a bundle into the wheelhouse `dest`, for `target` (default: this host)."""
    target = target or platforms.host()
    manifest = check_parts(bundle_dir)
    refuse_other_cpu(str(bundle_dir / MANIFEST), manifest.lock, target, manifest.platform)
    h = hashlib.sha256()
    dest.mkdir(parents=True, exist_ok=True)

    class Joined:
        def __init__(self) -> None:
            self.files = [paths.open_regular(bundle_dir / p.file, what="bundle part") for p in manifest.parts]

        def read(self, n: int = -1) -> bytes:
            buf = b""
            while self.files and (n < 0 or len(buf) < n):
                chunk = self.files[0].read(-1 if n < 0 else n - len(buf))
                if not chunk:
                    self.files.pop(0).close()
                    continue
                buf += chunk
            h.update(buf)
            return buf

    joined = Joined()
    allowed = {LOCK} | {w.file for w in manifest.lock.wheels}
    # wheels are zip files already: xz shrinks a wheelhouse a little, never a hundredfold
    bound = 64 * 2**20 + 8 * manifest.archive_bytes
    extract_flat_tar_xz(joined, dest, name=f"{bundle_dir}: the joined parts", allowed=allowed, max_bytes=bound)
    while joined.read(1 << 20):  # the xz stream may end before the last padding bytes
        pass
    if h.hexdigest() != manifest.archive_sha256:
        raise HarnessError(f"{bundle_dir}: the joined parts' sha256 is not the manifest's archive_sha256")
    check_lock(dest)
    return manifest


def interpreter(python: str) -> tuple[platforms.Platform, str, tuple[int, int]]:
    """The CPU platform a Python interpreter runs on, its implementation and version."""
    code = "import platform, sys; print(platform.machine(), sys.implementation.name, *sys.version_info[:2])"
    # its answer is data: bounded (a program that floods its output is ended) and checked word by word
    r = proc.run([python, "-c", code], timeout=60, max_output=64 << 10)
    hint = "give the Python that will import the site"
    if r.returncode != 0:
        raise ConfigError(f"--python {python}: it does not run ({grammar.one_line(r.stderr or '').strip()[-300:] or 'no output'})",
                          hint=hint)
    words = r.stdout.split()
    version = [numbers.problem(w, int, lo=0, hi=999)[0] for w in words[2:4]]
    if len(words) != 4 or not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", words[1]) or None in version:
        raise ConfigError(f"--python {python}: its answer is not a Python's: {grammar.one_line(r.stdout)[:200]!r} "
                          "(asked for platform.machine(), sys.implementation.name and the version)", hint=hint)
    return (platforms.parse(words[0], where=f"--python {python}: platform.machine()"), words[1],
            (int(words[2]), int(words[3])))


def python_refusal(filename: str, impl: str, version: tuple[int, int]) -> str | None:
    """None when a wheel's Python and ABI tags suit this interpreter (CPython: what pip accepts
    for py3/pyXY with no ABI, cpXY with its own ABI, cp3N-abi3 up to this version); else why not.
    Other implementations are not judged here."""
    if impl != "cpython":
        return None
    major, minor = version
    tag = filename[:-4].split("-")[-3:-1] if filename.endswith(".whl") else []
    if len(tag) != 2:
        return f"{filename} is not a wheel file name"

    def ok(py: str, abi: str) -> bool:
        n = re.fullmatch(rf"(py|cp){major}(\d*)", py)
        if n is None or (n[2] and int(n[2]) > minor):
            return False
        if abi == "none":
            return n[1] == "py" or n[2] == str(minor)
        if abi == "abi3":
            return n[1] == "cp"
        return n[1] == "cp" and n[2] == str(minor) and abi == f"cp{major}{minor}"

    if any(ok(py, abi) for py in tag[0].split(".") for abi in tag[1].split(".")):
        return None
    return f"{filename} is for {tag[0]}-{tag[1]}, not CPython {major}.{minor}"


def install_site(wheelhouse: Path, site: Path, python: str) -> list[str]:
    """Install every locked wheel into `site` with no index (pip, or unpacking where pip is absent).
    Every wheel is checked against that Python's CPU first: none for another is ever unpacked. The
    wheels returned are the ones found installed (each one's .dist-info in `site`)."""
    lock = check_lock(wheelhouse)
    files = [str(wheelhouse / w.file) for w in lock.wheels]
    if shutil.which(python) is None:
        raise ConfigError(f"--python {python}: no such interpreter", hint="give the Python that will import the site")
    cpu, impl, version = interpreter(python)
    refuse_other_cpu(str(wheelhouse / LOCK), lock, cpu)
    wrong = [why for w in lock.wheels if (why := python_refusal(w.file, impl, version))]
    if wrong:
        raise ConfigError(f"--python {python}: {len(wrong)} wheel(s) it cannot import: " + "; ".join(wrong[:5]),
                          hint=f"make the bundle for Python {version[0]}.{version[1]} (python_version in the "
                               "spec), or give the Python it was made for")
    site.mkdir(parents=True, exist_ok=True)
    has_pip = proc.run([python, "-m", "pip", "--version"], timeout=120, max_output=64 << 10).ok
    if has_pip:
        r = proc.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                      "--upgrade", "--target", str(site), *files], timeout=INSTALL_TIMEOUT_S, max_output=16 << 20)
        if r.returncode != 0:
            raise HarnessError(f"pip install into {site} failed: {r.stderr.strip()[-2000:]}")
    else:
        into = Root(site, what="--site")
        for f in files:  # bounded, relative names only, never through a link in --site
            unpack_wheel(f, into)
    found = {norm(d[:-len(".dist-info")].rsplit("-", 1)[0])
             for d in Root(site, what="--site").folders() if d.endswith(".dist-info")}
    missing = [w.file for w in lock.wheels if norm(w.name) not in found]
    if missing:
        raise HarnessError(f"{site}: {len(missing)} of {len(files)} wheel(s) not installed: {', '.join(missing[:5])}",
                           hint="see the pip output above; install into an empty folder")
    return [w.file for w in lock.wheels]
