"""CPU platforms: the one vocabulary for "which machine does this image, wheel or bundle run on".

Docker says `linux/amd64` and `linux/arm64`, `uname -m` says `x86_64` and `aarch64`, wheel tags
say `manylinux_2_28_x86_64` and Python markers `platform_machine == "aarch64"`. A DGX Spark is
linux/arm64 (its GB10 pairs Grace cores with the GPU); an RTX Pro 6000 workstation is usually
linux/amd64. Everything that picks or checks a platform goes through here, so that an amd64
image is never reused on an arm64 host and no wheel for another CPU is installed.
"""

from __future__ import annotations

import platform as _platform
import re
from dataclasses import dataclass

from harness.errors import ConfigError


@dataclass(frozen=True)
class Platform:
    docker: str  # "linux/amd64": what the engine and `docker build --platform` say
    machine: str  # "x86_64": uname -m, Python's platform_machine marker, the wheel tag's tail
    short: str  # "amd64": for image tags and file names

    def wheel_tags(self) -> tuple[str, ...]:
        """The manylinux tags pip accepts for this CPU, newest glibc first (glibc 2.17 and up:
        what CUDA base images carry)."""
        newer = [f"manylinux_2_{n}_{self.machine}" for n in range(39, 16, -1)]
        legacy = [f"manylinux2014_{self.machine}"] + ([f"manylinux1_{self.machine}"] if self.machine == "x86_64" else [])
        return (*newer, *legacy)

    def markers(self) -> dict[str, str]:
        """The PEP 508 environment entries that depend on the CPU (the rest come from Python)."""
        return {"platform_machine": self.machine, "sys_platform": "linux", "platform_system": "Linux",
                "os_name": "posix"}

    def takes_wheel(self, filename: str) -> bool:
        """Whether a wheel file, by the platform tag in its name, installs on this CPU: a pure
        wheel (`any`) or one whose Linux tag names this machine."""
        targets = wheel_targets(filename)
        return "any" in targets or self.machine in targets

    def describe(self) -> str:
        return f"{self.docker} ({self.machine})"


AMD64 = Platform("linux/amd64", "x86_64", "amd64")
ARM64 = Platform("linux/arm64", "aarch64", "arm64")
KNOWN = (AMD64, ARM64)
_ALIASES = {
    "linux/amd64": AMD64, "amd64": AMD64, "x86_64": AMD64, "x86-64": AMD64, "x64": AMD64,
    "linux/arm64": ARM64, "linux/arm64/v8": ARM64, "arm64": ARM64, "aarch64": ARM64, "arm64/v8": ARM64,
}


def parse(value: str, *, where: str = "--platform") -> Platform:
    """A platform from any of its spellings; anything else is bad input naming the valid ones."""
    p = _ALIASES.get(value.strip().lower())
    if p is None:
        raise ConfigError(f"{where}: unknown platform {value[:64]!r}",
                          hint="use linux/amd64 (x86_64) or linux/arm64 (aarch64, a DGX Spark)")
    return p


# a Linux platform tag: linux_<cpu>, manylinux1/2010/2014_<cpu>, manylinux_2_28_<cpu>, musllinux_1_2_<cpu>
_LINUX_TAG = re.compile(r"(?:linux|manylinux(?:1|2010|2014)|manylinux_\d+_\d+|musllinux_\d+_\d+)_(?P<cpu>[a-z0-9_]+)")


def wheel_targets(filename: str) -> tuple[str, ...]:
    """What a wheel's file name says it runs on, one entry per platform tag (a name may carry
    several, joined by '.'): `any` for a pure wheel, the CPU (`uname -m` spelling) for a Linux
    tag, the whole tag for anything else (macosx_14_0_arm64, win_amd64). A name that is not a
    wheel's gives ()."""
    if not filename.endswith(".whl") or filename.count("-") < 4:
        return ()
    out = []
    for tag in filename[:-4].rsplit("-", 1)[1].split("."):
        m = _LINUX_TAG.fullmatch(tag)
        out.append(m["cpu"] if m else tag)
    return tuple(out)


def wheel_refusal(filename: str, target: Platform) -> str | None:
    """None when `filename` installs on `target`; else one line saying what the wheel is for."""
    if target.takes_wheel(filename):
        return None
    names = wheel_targets(filename)
    return (f"{filename} is built for {', '.join(dict.fromkeys(names)) or 'no platform its name states'}, "
            f"not {target.describe()}")


def of_engine(os_name: str | None, arch: str | None) -> Platform | None:
    """The platform an engine or image reports (`docker info` Architecture, an image's
    Os/Architecture); None when it is not one this tool builds for."""
    if os_name not in (None, "", "linux") or not arch:
        return None
    return _ALIASES.get(arch.lower())


def host() -> Platform:
    """This machine's platform, from its CPU."""
    p = _ALIASES.get(_platform.machine().lower())
    if p is None:
        raise ConfigError(f"this host's CPU {_platform.machine()!r} is not one vLLM images are built for",
                          hint="use an x86_64 or aarch64 host, or pass --platform")
    return p
