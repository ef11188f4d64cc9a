"""Benchmark client (`client.bench(url, model, settings.BenchSettings(...))` -> `result.BenchResult`)
and its noise and roofline judgements. The fake vLLM server it is tested against is a test
double: tests/support/fakeserver.py. Nothing is imported here: a module of the package imports
its package first, so an `__init__` importing them back would draw a circle.
"""
