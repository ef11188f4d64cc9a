"""Benchmark client (`run_bench`, `bench`) and its noise and roofline judgements. The fake
vLLM server it is tested against is a test double: tests/support/fakeserver.py."""

from harness.bench.client import bench, run_bench
from harness.bench.result import BenchResult, LevelResult

__all__ = ["BenchResult", "LevelResult", "bench", "run_bench"]
