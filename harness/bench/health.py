"""Output health: is the model still writing text, or looping on one phrase?

Method from the serving-levers sweep (matrix/rtx-pro-6000.toml): 4-grams over whitespace-split words; a text
of under 40 words is too short to judge and scores 1.0; under 0.6 it is degenerate.
"""

from __future__ import annotations

MIN_WORDS = 40
DEGENERATE_BELOW = 0.6


def diversity(text: str) -> float:
    """Distinct 4-grams / all 4-grams of the text's words."""
    words = text.split()
    if len(words) < MIN_WORDS:
        return 1.0
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    return len(set(grams)) / len(grams)


def is_degenerate(score: float) -> bool:
    return score < DEGENERATE_BELOW
