"""Build, verify and measure vLLM stacks on Blackwell workstation GPUs."""

__version__ = "0.1.0"
