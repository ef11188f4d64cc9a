"""Inside a wheel-stack image build (docker/Dockerfile.wheels.in): install, patch, check.

  wheels.py install --python PY --vllm V --vllm-sha256 H --torch T [--wheelhouse DIR] ...
  wheels.py patch   --python PY PATCH...      Python-file patches, applied to site-packages
  wheels.py check   --python PY --vllm V --torch T [--flashinfer F]

Standard library only: it runs on whatever Python the base image has. Every step prints what it
did; any mismatch exits non-zero, which fails the build step.
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile

SITE_FILE = "/opt/build/site-packages.txt"


def die(msg):
    print("wheels.py: error: " + msg, flush=True)
    sys.exit(1)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def query(python, code):
    return subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def site_dir(python):
    return query(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")


def has_pip(python):
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0


def norm(name):
    return re.sub(r"[-_.]+", "_", name).lower()


# a Linux platform tag, as harness/platforms.py reads it (no harness import here: the standard
# library only): linux_<cpu>, manylinux1/2010/2014_<cpu>, manylinux_2_28_<cpu>, musllinux_1_2_<cpu>
LINUX_TAG = re.compile(r"(?:linux|manylinux(?:1|2010|2014)|manylinux_\d+_\d+|musllinux_\d+_\d+)_([a-z0-9_]+)$")


def wheel_targets(filename):
    """'any', the CPU of each Linux tag, or the whole tag otherwise, from a wheel's file name."""
    tags = filename[:-4].rsplit("-", 1)[-1].split(".") if filename.endswith(".whl") else []
    out = []
    for t in tags:
        m = LINUX_TAG.match(t)
        out.append(m.group(1) if m else t)
    return out


def refuse_other_cpu(python, lock):
    """Stop before installing anything when a wheel (or the whole wheelhouse) is for another CPU
    than the one this image's Python runs on."""
    machine = query(python, "import platform; print(platform.machine())")
    made = lock.get("platform") or ""
    wrong = []
    for w in lock["wheels"]:
        targets = set(wheel_targets(w["file"]))
        if not targets & {"any", machine}:
            wrong.append("{} is built for {}".format(w["file"], ", ".join(sorted(targets)) or "no platform"))
    if wrong:
        die("this image's Python runs on {}; the wheelhouse ({}) holds wheels for another CPU: {}".format(
            machine, made or "no platform recorded", "; ".join(wrong)))
    print("wheelhouse for {}: every wheel is pure or {} ({} wheels)".format(
        made or "(not recorded)", machine, len(lock["wheels"])), flush=True)


def install(a):
    if a.wheelhouse:
        lock = json.load(open(os.path.join(a.wheelhouse, "wheels.lock")))
        files = []
        for w in lock["wheels"]:
            path = os.path.join(a.wheelhouse, w["file"])
            got = sha256(path)
            if got != w["sha256"]:
                die("{}: sha256 {} is not the lock's {}".format(w["file"], got, w["sha256"]))
            files.append(path)
        refuse_other_cpu(a.python, lock)
        vllm = [w for w in lock["wheels"] if w["name"] == "vllm"]
        if len(vllm) != 1 or vllm[0]["version"] != a.vllm:
            die("wheels.lock has no vllm {} wheel (found {})".format(a.vllm, [w["version"] for w in vllm]))
        if a.vllm_sha256 and vllm[0]["sha256"] != a.vllm_sha256:
            die("the vllm wheel's sha256 {} is not the stack's pin {}".format(vllm[0]["sha256"], a.vllm_sha256))
        for w in lock["wheels"]:
            note = " (re-packed: {})".format(w.get("strip_reason")) if w.get("repacked") else ""
            print("wheel {} {} sha256 {}{}".format(w["name"], w["version"], w["sha256"], note), flush=True)
        if has_pip(a.python):
            cmd = [a.python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile"] + files
            print("+ " + " ".join(cmd[:8]) + f" ... ({len(files)} wheels)", flush=True)
            subprocess.run(cmd, check=True)
        else:  # no pip in the base: unpack each wheel into site-packages, as pip would
            site = site_dir(a.python)
            for f in files:
                with zipfile.ZipFile(f) as z:
                    z.extractall(site)
            print(f"unpacked {len(files)} wheels into {site} (no pip in this Python)", flush=True)
    else:
        if not has_pip(a.python):
            die(f"{a.python} has no pip: a PyPI wheel stack needs one (or give a wheelhouse)")
        dl = "/opt/build/download"
        subprocess.run([a.python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", dl,
                        "vllm==" + a.vllm], check=True)
        wheel = [os.path.join(dl, f) for f in os.listdir(dl) if f.startswith("vllm-") and f.endswith(".whl")]
        if len(wheel) != 1:
            die(f"expected one vllm wheel, got {wheel}")
        got = sha256(wheel[0])
        if a.vllm_sha256 and got != a.vllm_sha256:
            die(f"{wheel[0]}: sha256 {got} is not the stack's pin {a.vllm_sha256}")
        print(f"wheel vllm {a.vllm} sha256 {got}", flush=True)
        reqs = [wheel[0]] + (["torch==" + a.torch] if a.torch else []) + \
            (["flashinfer-python==" + a.flashinfer] if a.flashinfer else [])
        extra = ["--extra-index-url", a.torch_index_url] if a.torch_index_url else []
        subprocess.run([a.python, "-m", "pip", "install"] + extra + reqs, check=True)


def apply_patch(site, path):
    """A strict unified-diff applier (exact context, no fuzz; a hunk may have moved, as git apply
    allows), for a base image without git or patch."""
    text = open(path).read()
    files = re.split(r"(?m)^(?=--- )", text)
    for block in files[1:]:
        m = re.match(r"--- (\S+).*\n\+\+\+ (\S+).*\n", block)
        if not m:
            die(f"{path}: malformed file header")
        target = m.group(2).split("/", 1)[1] if m.group(2).startswith("b/") else m.group(2)
        full = os.path.join(site, target)
        if not os.path.isfile(full):
            die(f"{path}: {target} is not installed in {site}")
        old = open(full).read().split("\n")
        out, pos = [], 0
        for hunk in re.finditer(r"(?m)^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*\n((?:[ +\-\\].*(?:\n|$))*)",
                                block[m.end():]):
            start = int(hunk.group(1)) - 1
            lines = [ln for ln in hunk.group(2).split("\n") if ln and not ln.startswith("\\")]
            src = [ln[1:] for ln in lines if ln[0] in " -"]
            dst = [ln[1:] for ln in lines if ln[0] in " +"]
            if start < 0:
                start = 0
            if old[start:start + len(src)] != src:  # like git apply: the exact context, moved
                found = [i for i in range(pos, len(old) - len(src) + 1) if old[i:i + len(src)] == src]
                if not found:
                    die(f"{path}: hunk at line {start + 1} does not apply to {target} (context differs)")
                start = min(found, key=lambda i: abs(i - start))
            out += old[pos:start] + dst
            pos = start + len(src)
        out += old[pos:]
        open(full, "w").write("\n".join(out))
        print(f"patched {target} ({os.path.basename(path)})", flush=True)


def patch(a):
    site = a.site or site_dir(a.python)
    for p in a.patches:
        apply_patch(site, p)


def version_of(python, dist):
    code = (f"import importlib.metadata as m\ntry:\n print(m.version({dist!r}))\nexcept m.PackageNotFoundError:\n print('')")
    return query(python, code)


def check(a):
    site = site_dir(a.python)
    problems = []
    for dist, want in (("vllm", a.vllm), ("torch", a.torch), ("flashinfer-python", a.flashinfer)):
        got = version_of(a.python, dist)
        print("installed {} {}".format(dist, got or "(absent)"), flush=True)
        if want and got.split("+")[0] != want.split("+")[0]:
            problems.append("{} is {}, the stack pins {}".format(dist, got or "absent", want))
    if problems:
        die("; ".join(problems))
    os.makedirs(os.path.dirname(SITE_FILE), exist_ok=True)
    open(SITE_FILE, "w").write(site + "\n")
    print(f"site-packages {site}", flush=True)


def main():
    p = argparse.ArgumentParser()
    s = p.add_subparsers(dest="cmd")
    i = s.add_parser("install")
    i.add_argument("--python", required=True)
    i.add_argument("--vllm", required=True)
    i.add_argument("--vllm-sha256", default="")
    i.add_argument("--torch", default="")
    i.add_argument("--torch-index-url", default="")
    i.add_argument("--flashinfer", default="")
    i.add_argument("--wheelhouse", default="")
    pa = s.add_parser("patch")
    pa.add_argument("--python", required=True)
    pa.add_argument("--site", default="", help="patch this folder instead of the Python's site-packages")
    pa.add_argument("patches", nargs="+")
    c = s.add_parser("check")
    c.add_argument("--python", required=True)
    c.add_argument("--vllm", required=True)
    c.add_argument("--torch", default="")
    c.add_argument("--flashinfer", default="")
    a = p.parse_args()
    {"install": install, "patch": patch, "check": check}[a.cmd](a)


if __name__ == "__main__":
    main()
