"""MemWatch: the least-squares fit and the leak rule on synthetic series; the real sampler."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from harness.results.memwatch import MemWatch, analyse, fit, read_mem_available_gib


def series(
    minutes: float,
    slope_gib_per_h: float,
    step_s: float = 10,
    noise: float = 0.0,
    start: float = 100.0,
    seed: int = 0,
):
    rng = random.Random(seed)
    n = int(minutes * 60 / step_s) + 1
    return [
        [i * step_s, start + slope_gib_per_h * i * step_s / 3600 + rng.uniform(-noise, noise), None]
        for i in range(n)
    ]


def test_fit_is_least_squares():
    slope, r2 = fit([(0, 1.0), (1, 3.0), (2, 5.0)])
    assert slope == pytest.approx(2.0) and r2 == pytest.approx(1.0)
    slope, r2 = fit([(0, 0.0), (1, 1.0), (2, 0.0), (3, 1.0)])
    assert slope == pytest.approx(0.2) and r2 == pytest.approx(0.2)
    assert fit([(0, 1.0)]) is None and fit([(5, 1.0), (5, 2.0)]) is None


def test_steady_loss_is_a_leak():
    m = analyse(series(10, -6.0), interval_s=10)
    assert m["leak"] is True
    assert m["host_slope_gib_per_h"] == pytest.approx(-6.0, rel=1e-3)
    assert "GiB/h" in m["reason"] and "driver" in m["reason"]
    assert m["gpu_slope_gib_per_h"] is None and len(m["samples"]) == 61


def test_the_590_story_shape_is_a_leak_even_with_noise():
    # 80 of 128 GB gone over a long soak, with +-0.3 GiB sample noise.
    m = analyse(series(120, -40.0, step_s=30, noise=0.3), interval_s=30)
    assert m["leak"] is True and m["host_fit_r2"] > 0.9


def test_flat_slow_or_noisy_is_not_a_leak():
    assert analyse(series(10, 0.0))["leak"] is False
    assert analyse(series(30, -0.5))["leak"] is False  # under the 1 GiB/h threshold
    noisy = analyse(series(10, -3.0, noise=2.0, seed=3))
    assert noisy["leak"] is False and noisy["host_fit_r2"] < 0.8
    growing = analyse(series(10, +5.0))
    assert growing["leak"] is False and growing["host_slope_gib_per_h"] > 0


def test_short_windows_are_not_judged():
    m = analyse(series(1.5, -60.0))  # steep, but only 90 s
    assert m["leak"] is False and "too short" in m["reason"]
    assert analyse([])["leak"] is False


def test_gpu_slope_is_fitted_and_reported():
    samples = [[t, 100.0, 10.0 + 4.0 * t / 3600] for t in range(0, 601, 20)]
    m = analyse(samples)
    assert m["gpu_slope_gib_per_h"] == pytest.approx(4.0, rel=1e-3)
    assert "GPU memory used grows" in m["reason"] and m["leak"] is False


def test_reads_this_machines_meminfo():
    gib = read_mem_available_gib()
    total = (
        int(
            next(
                ln
                for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal:")
            ).split()[1]
        )
        / 2**20
    )
    assert 0 < gib <= total


def test_meminfo_without_memavailable_is_an_error(tmp_path):
    p = tmp_path / "meminfo"
    p.write_text("MemTotal: 1000 kB\n")
    with pytest.raises(ValueError, match="MemAvailable"):
        read_mem_available_gib(p)


def test_real_sampler_collects_and_analyses():
    with MemWatch(interval_s=0.02) as watch:
        # until it has sampled four times: how fast a busy machine lets the thread run is not
        # what this checks (a fixed 0.2 s once gave it two samples in CI)
        deadline = time.monotonic() + 120
        while len(watch.samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
    samples = watch.samples
    assert len(samples) >= 4
    assert all(s[1] is not None and s[1] > 0 for s in samples)
    assert [s[0] for s in samples] == sorted(s[0] for s in samples)
    result = watch.result()
    assert result["interval_s"] == 0.02 and result["leak"] is False
    assert "too short" in result["reason"]


def test_gpu_reader_is_used_when_given():
    with MemWatch(interval_s=0.02, gpu_reader=lambda: 12.5) as watch:
        deadline = time.monotonic() + 120
        while len(watch.samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(watch.samples) >= 2 and all(s[2] == 12.5 for s in watch.samples)


def test_only_samples_after_the_steady_mark_are_judged(tmp_path):
    # start-up takes memory by design (weights, KV cache): it must not read as a leak
    import time

    from harness.results.memwatch import MemWatch

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100000000 kB\nMemAvailable: 90000000 kB\n")
    w = MemWatch(interval_s=0.02, meminfo=meminfo, gpu_reader=lambda: None)
    w.start()
    time.sleep(0.15)
    meminfo.write_text("MemTotal: 100000000 kB\nMemAvailable: 40000000 kB\n")  # the server loaded
    time.sleep(0.1)
    w.mark_steady()
    time.sleep(0.15)
    w.stop()
    r = w.result()
    assert r["steady_from_s"] > 0.2
    steady = [s for s in r["samples"] if s[0] >= r["steady_from_s"]]
    assert steady and all(abs(s[1] - 40000000 / 2**20) < 1e-3 for s in steady)
    assert r["duration_s"] < r["samples"][-1][0]  # the judged window starts at the mark
    assert r["leak"] is False
