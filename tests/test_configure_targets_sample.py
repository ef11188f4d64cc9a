"""tools/configure_targets.py's sampled compile and whole-build estimate (what
examples/default-release/device.sh sample records), on a real ninja: a build graph whose steps
sleep for known times stands in for nvcc, so the step times, the budget stop and the estimate
can be checked exactly. The object list comes from a real 0.33.0 build.ninja's naming."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("configure_targets", ROOT / "tools" / "configure_targets.py")
ct = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ct)

pytestmark = pytest.mark.skipif(shutil.which("ninja") is None, reason="no ninja on PATH")


def _graph(build: Path, steps: dict[str, float]) -> str:
    """A build.ninja naming objects as CMake does (CMakeFiles/<target>.dir/<source>.o), each step a sleep."""
    lines = ["rule sleep", "  command = sleep $secs && touch $out", ""]
    for out, secs in steps.items():
        lines += [f"build {out}: sleep", f"  secs = {secs}", ""]
    text = "\n".join(lines)
    (build / "build.ninja").write_text(text)
    return text


STEPS = {
    "CMakeFiles/_C_stable_libtorch.dir/csrc/a.cu.o": 0.4,
    "CMakeFiles/_C_stable_libtorch.dir/csrc/b.cu.o": 0.4,
    "CMakeFiles/_C_stable_libtorch.dir/csrc/c.cu.o": 0.4,
    "CMakeFiles/_C_stable_libtorch.dir/csrc/d.cu.o": 0.4,
    "CMakeFiles/_moe_C_stable_libtorch.dir/csrc/moe/e.cu.o": 0.2,
    "CMakeFiles/_moe_C_stable_libtorch.dir/csrc/moe/f.cpp.o": 0.2,
}


def test_objects_are_read_and_sampled_per_target_and_the_whole_is_estimated(tmp_path):
    text = _graph(tmp_path, STEPS)
    graph = ct.objects(text)
    assert [(t, lang) for _o, t, lang in graph] == [("_C_stable_libtorch", "cu")] * 4 + [
        ("_moe_C_stable_libtorch", "cu"), ("_moe_C_stable_libtorch", "cpp")]
    picked = ct.sample(graph, 2)
    assert [o.rsplit("/", 1)[-1] for o, _t, _l in picked] == ["a.cu.o", "c.cu.o", "e.cu.o"]
    done = ct.compile_targets(tmp_path, [o for o, _t, _l in picked], jobs=2)
    assert done["returncode"] == 0 and done["steps"] == 3 and not done["stopped_by_budget"]
    assert all(0.15 <= s <= 2.0 for s in done["step_seconds"].values()), done["step_seconds"]
    est = ct.estimate(graph, done["step_seconds"], jobs=2)
    per = est["per_target"]
    assert (per["_C_stable_libtorch"]["objects"], per["_C_stable_libtorch"]["timed"]) == (4, 2)
    mean_c = per["_C_stable_libtorch"]["timed_step_s"] / 2
    assert per["_C_stable_libtorch"]["estimated_step_s"] == round(mean_c * 4, 1)
    assert est["timed_objects"] == 3 and est["objects"] == 6 and est["targets_without_a_timed_object"] == []
    assert est["kind"] == "estimate from sampled step times"
    # a target none of whose objects was timed is named, not guessed
    only_c = {k: v for k, v in done["step_seconds"].items() if "_moe_" not in k}
    assert ct.estimate(graph, only_c, jobs=2)["targets_without_a_timed_object"] == ["_moe_C_stable_libtorch"]


def test_a_budget_stops_ninja_and_its_steps_and_keeps_what_finished(tmp_path):
    _graph(tmp_path, {"CMakeFiles/x.dir/quick.cu.o": 0.1, "CMakeFiles/x.dir/slow.cu.o": 30})
    done = ct.compile_targets(tmp_path, ["CMakeFiles/x.dir/quick.cu.o", "CMakeFiles/x.dir/slow.cu.o"], jobs=2,
                              budget_s=3)
    assert done["stopped_by_budget"] and done["wall_s"] < 15
    assert list(done["step_seconds"]) == ["CMakeFiles/x.dir/quick.cu.o"]
    assert done["unfinished"] == ["CMakeFiles/x.dir/slow.cu.o"]
    # the stopped step had run about the whole budget: a floor of its cost, counted so in the estimate
    ran = done["unfinished_ran_s"]["CMakeFiles/x.dir/slow.cu.o"]
    assert 2.0 <= ran <= 6.0, ran
    graph = [("CMakeFiles/x.dir/quick.cu.o", "x", "cu"), ("CMakeFiles/x.dir/slow.cu.o", "x", "cu")]
    est = ct.estimate(graph, done["step_seconds"], 2, done["unfinished_ran_s"])
    assert est["kind"].endswith("(a floor: some steps were stopped)") and est["stopped_steps_counted_as_run_so_far"] == 1
    assert est["per_target"]["x"]["timed_step_s"] == round(done["step_seconds"]["CMakeFiles/x.dir/quick.cu.o"] + ran, 1)
