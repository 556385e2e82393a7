"""Scoring (RULER-style string match, but on token boundaries) and Wilson confidence intervals."""

from __future__ import annotations

import math
import re


def contains(output: str, answer: str) -> bool:
    """``answer`` appears in ``output`` as a whole number/word (so 12345 does not match 123456)."""
    return re.search(rf"(?<![0-9A-Za-z]){re.escape(answer)}(?![0-9A-Za-z])", output, flags=re.IGNORECASE) is not None


def score(output: str, answers: list[str]) -> bool:
    """Correct iff every expected answer appears (one for passkey/needles, all five names for vt)."""
    if not answers:
        raise ValueError("a question needs at least one expected answer")
    return all(contains(output or "", a) for a in answers)


def wilson(correct: int, total: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95% Wilson score interval for ``correct`` successes out of ``total``; (0, 1) when total is 0."""
    if total < 0 or not 0 <= correct <= total:
        raise ValueError(f"need 0 <= correct <= total, got {correct}/{total}")
    if total == 0:
        return 0.0, 1.0
    p = correct / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    # the interval holds p exactly at the ends, where rounding could leave it a hair inside
    return (0.0 if correct == 0 else max(0.0, centre - half)), (1.0 if correct == total else min(1.0, centre + half))
