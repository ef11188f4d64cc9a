"""harness.platforms: one vocabulary for CPU platforms (docker, uname, wheel tags, markers)."""

from __future__ import annotations

import pytest

from harness import platforms
from harness.errors import ConfigError


@pytest.mark.parametrize("spelling,short", [
    ("linux/amd64", "amd64"), ("amd64", "amd64"), ("x86_64", "amd64"), ("X86_64", "amd64"),
    ("linux/arm64", "arm64"), ("linux/arm64/v8", "arm64"), ("aarch64", "arm64"), ("arm64", "arm64"),
])
def test_every_spelling_names_one_platform(spelling, short):
    assert platforms.parse(spelling).short == short


@pytest.mark.parametrize("bad", ["", "linux/riscv64", "windows/amd64", "x86_64; rm -rf /", "a" * 500])
def test_an_unknown_platform_is_bad_input(bad):
    with pytest.raises(ConfigError) as exc:
        platforms.parse(bad)
    assert "linux/amd64" in exc.value.hint and len(exc.value.message) < 200


def test_wheel_tags_and_markers_follow_the_cpu():
    arm = platforms.ARM64
    assert all(t.endswith("_aarch64") for t in arm.wheel_tags())
    assert "manylinux_2_28_aarch64" in arm.wheel_tags() and "manylinux1_aarch64" not in arm.wheel_tags()
    assert "manylinux1_x86_64" in platforms.AMD64.wheel_tags()
    assert arm.markers()["platform_machine"] == "aarch64"


def test_engine_reports_map_to_platforms():
    assert platforms.of_engine("linux", "arm64") is platforms.ARM64
    assert platforms.of_engine("linux", "amd64") is platforms.AMD64
    assert platforms.of_engine("windows", "amd64") is None
    assert platforms.of_engine("linux", "s390x") is None
    assert platforms.host() in platforms.KNOWN
