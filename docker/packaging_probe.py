"""The packaging probe of a vLLM source build, inside the image build (stdlib only).

    packaging_probe.py stand-in SRC      # before the template's install step
    packaging_probe.py report OUT        # after it

`stand-in` swaps SRC/CMakeLists.txt (kept as CMakeLists.txt.harness-real) for one that defines
every CMake target setup.py asks for, each an empty C library (or, for the targets vLLM's CMake
declares with add_custom_target, a Python-only component with its folder), installed where the
real ones go. The template's real install step then runs unchanged: build requirements, setup.py
and setuptools-scm, the optional Rust front end, the wheel, and pip resolving and installing the
release's runtime requirements for this torch and this CPU. Nothing of the kernels is compiled:
the image this makes can never serve (its extensions are empty) and is labelled a probe.

`report` writes OUT/packaging.json: what got installed (vLLM, FlashInfer, torch), `pip check`,
the Rust front end, the platform, the stand-in targets.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

EXTENSION = re.compile(r"CMakeExtension\(\s*name\s*=\s*[\"']([A-Za-z0-9_.]+)[\"']")
CUSTOM_TARGET = re.compile(r"add_custom_target\(\s*([A-Za-z0-9_]+)")
# a target some branch of vLLM's CMake builds as a library (its custom target is then the
# empty stand-in of a branch that skips it)
LIBRARY_TARGET = re.compile(r"(?:define_(?:extension|gpu_extension)_target|add_library|Python_add_library)\(\s*([A-Za-z0-9_]+)")
REAL = "CMakeLists.txt.harness-real"
STANDIN_LIST = "harness-standin-targets.json"


def extensions(setup_py: str) -> list[str]:
    return sorted(set(EXTENSION.findall(setup_py)))


def custom_targets(src: Path) -> set[str]:
    """Targets vLLM's CMake only ever declares with add_custom_target: Python-only components."""
    custom: set[str] = set()
    library: set[str] = set()
    for path in [src / "CMakeLists.txt", *sorted((src / "cmake").rglob("*.cmake"))]:
        if path.is_file():
            text = path.read_text(errors="replace")
            custom |= set(CUSTOM_TARGET.findall(text))
            library |= set(LIBRARY_TARGET.findall(text))
    return custom - library


def standin_cmake(exts: list[str], python_only: set[str]) -> str:
    lines = [
        "# harness packaging probe: stand-ins for every extension setup.py builds; no kernel is compiled",
        "cmake_minimum_required(VERSION 3.26)",
        "project(vllm_packaging_probe LANGUAGES C)",
        'execute_process(COMMAND "${VLLM_PYTHON_EXECUTABLE}" -c '
        '"import sysconfig; print(sysconfig.get_config_var(\'EXT_SUFFIX\'))" '
        "OUTPUT_VARIABLE EXT_SUFFIX OUTPUT_STRIP_TRAILING_WHITESPACE)",
        'file(WRITE "${CMAKE_BINARY_DIR}/harness_standin.c" "void harness_packaging_probe(void) {}\\n")',
    ]
    for ext in exts:
        parts = ext.split(".")
        target, dest = parts[-1], "/".join(parts[:-1])
        if target in python_only:
            lines += [f"add_custom_target({target})",
                      f'install(CODE "file(MAKE_DIRECTORY \\"\\${{CMAKE_INSTALL_PREFIX}}/vllm/third_party/{target}\\")" '
                      f"COMPONENT {target})"]
        else:
            lines += [f'add_library({target} MODULE "${{CMAKE_BINARY_DIR}}/harness_standin.c")',
                      f'set_target_properties({target} PROPERTIES PREFIX "" SUFFIX "${{EXT_SUFFIX}}")',
                      f"install(TARGETS {target} LIBRARY DESTINATION {dest} COMPONENT {target})"]
    return "\n".join(lines) + "\n"


def stand_in(src: Path) -> int:
    setup = (src / "setup.py").read_text(errors="replace")
    exts = extensions(setup)
    if not exts:
        print("packaging probe: setup.py names no CMakeExtension: nothing to stand in for", file=sys.stderr)
        return 1
    python_only = custom_targets(src) & {e.split(".")[-1] for e in exts}
    (src / "CMakeLists.txt").rename(src / REAL)
    (src / "CMakeLists.txt").write_text(standin_cmake(exts, python_only))
    (src / STANDIN_LIST).write_text(json.dumps({"extensions": exts, "python_only": sorted(python_only)}))
    print(f"packaging probe: {len(exts)} extension(s) stood in "
          f"({len(python_only)} Python-only: {', '.join(sorted(python_only)) or 'none'})", flush=True)
    return 0


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def report(out: Path, src: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    rust_file = Path("/opt/build/rust-frontend.txt")
    site_file = Path("/opt/build/site-packages.txt")
    standin = src / STANDIN_LIST
    data = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "vllm": version("vllm"),
        "flashinfer": version("flashinfer-python"),
        "torch": version("torch"),
        "distributions": len(list(metadata.distributions())),
        "pip_check_rc": check.returncode,
        "pip_check": (check.stdout + check.stderr).strip().splitlines()[-40:],
        "rust_frontend": rust_file.read_text().strip() if rust_file.is_file() else None,
        "site_packages": site_file.read_text().strip() if site_file.is_file() else None,
        "stand_in": json.loads(standin.read_text()) if standin.is_file() else None,
    }
    # the base stage's build requirements, checked again in the finished image (no install):
    # the record holds them even when the engine took that stage from its cache
    reqs = Path("/opt/build/build-requirements.txt")
    if reqs.is_file():
        r = subprocess.run([sys.executable, "/opt/build/build_requirements.py", str(reqs), "--no-index"],
                           capture_output=True, text=True)
        data["build_requirements_rc"] = r.returncode
        data["build_requirements"] = [line for line in (r.stdout + r.stderr).splitlines()
                                      if line.startswith(("build requirement ", "harness: build requirement "))][:200]
    (out / "packaging.json").write_text(json.dumps(data, indent=1))
    print(f"packaging probe: vllm {data['vllm']}, flashinfer {data['flashinfer']}, torch {data['torch']} "
          f"on {data['machine']} Python {data['python']}; pip check exit {check.returncode}; "
          f"Rust front end: {data['rust_frontend']}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "stand-in":
        return stand_in(Path(argv[1]))
    if len(argv) == 3 and argv[0] == "report":
        return report(Path(argv[1]), Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
