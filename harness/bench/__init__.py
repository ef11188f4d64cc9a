"""Benchmark client (`run_bench`, `bench`), its noise and roofline judgements, and a fake
vLLM server (`fakeserver.py`, standard library only) that streams at a known rate."""

from harness.bench.client import bench, run_bench
from harness.bench.result import BenchResult, LevelResult

__all__ = ["BenchResult", "LevelResult", "bench", "run_bench"]
