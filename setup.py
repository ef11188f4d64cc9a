"""Ships the repository's top-level docker/ (Dockerfile templates and the helpers they COPY) inside
the wheel, as harness/data/docker, where harness.image.render finds them when installed.
Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DOCKER = Path(__file__).resolve().parent / "docker"


class BuildPyWithDocker(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib, "harness", "data", "docker")
        target.mkdir(parents=True, exist_ok=True)
        for src in sorted(DOCKER.iterdir()):
            if src.is_file():
                shutil.copy2(src, target / src.name)


setup(cmdclass={"build_py": BuildPyWithDocker})
