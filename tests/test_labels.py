"""Every `harness.*` label key comes from harness/labels.py: no other module of the package spells
one (a key written twice drifts: `harness.role` was written eleven times while the engine's own
constant for it went unused)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from harness import labels
from harness.image.render import labels_for
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import import_graph  # noqa: E402

_DOTTED = re.compile(r"harness(?:\.[A-Za-z_]\w*)+")


def _names_a_module(text: str, modules: set[str]) -> bool:
    """`harness.cli.plan` (a command's module) or `harness.http` (a logger): a module, or an
    attribute of one, not a label key."""
    if not _DOTTED.fullmatch(text):
        return False
    parts = text.split(".")
    return any(".".join(parts[:i]) in modules for i in range(2, len(parts) + 1))


def test_no_module_but_labels_spells_a_label_key():
    modules = set(import_graph.modules(ROOT))
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path == ROOT / "harness" / "labels.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value.startswith("harness.") and not _names_a_module(node.value, modules)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "label keys outside harness/labels.py:\n" + "\n".join(found)


def test_the_check_catches_a_literal_and_an_f_string_prefix(tmp_path):
    modules = set(import_graph.modules(ROOT))
    tree = ast.parse('x = {"harness.role": "serve"}\ny = f"harness.{k}"\nlog = "harness.http"\n')
    caught = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
              and n.value.startswith("harness.") and not _names_a_module(n.value, modules)]
    assert caught == ["harness.role", "harness."]


def test_keys_are_the_ones_on_images_and_containers_today():
    """The names are an interface (docker inspect, a reused image's record, the reaper's filter):
    moving them into one module changed none of them."""
    assert (labels.RUN_ID, labels.ROLE, labels.CELL) == ("harness.run-id", "harness.role", "harness.cell")
    assert labels.CONTROLLER_HOST == "harness.controller.host"
    assert labels.patch_sha256("vllm", "0001-x.patch") == "harness.vllm.patch.0001-x.patch.sha256"
    m = load_matrix(ROOT / "matrix" / "spark.toml")
    name = next(iter(m.spec.stacks))
    got = labels_for(name, m.spec.stacks[name], [], "abc")
    assert got["harness.role"] == "image" and got["harness.stack"] == name
    assert got["harness.content-hash"] == "abc"
    assert all(labels.is_ours(k) for k in got)
