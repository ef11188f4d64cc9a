"""The stages of `harness run`, in order: build -> serve -> measure -> judge -> store.

Each module owns one stage and returns a typed outcome; harness/pipeline.py strings them
together per cell and is the only place that knows the order.
"""
