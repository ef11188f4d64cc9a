"""Benchmark client (`bench(url, model, BenchSettings(...)) -> BenchResult`) and its noise and roofline judgements. The fake
vLLM server it is tested against is a test double: tests/support/fakeserver.py."""

from harness.bench.client import bench, run_bench
from harness.bench.result import BenchResult, LevelResult
from harness.bench.settings import BenchSettings

__all__ = ["BenchResult", "BenchSettings", "LevelResult", "bench", "run_bench"]
