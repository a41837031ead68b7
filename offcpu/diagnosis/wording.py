"""How the findings say numbers: times, shares and counts (the renderers say them the same way)."""

from __future__ import annotations


def us_text(us: float) -> str:
    if us >= 1_000_000:
        return f"{us / 1e6:.1f} s"
    if us >= 1000:
        return f"{us / 1000:.1f} ms"
    return f"{us:.0f} µs"


def pct(share: float) -> str:
    return f"{share:.0%}" if share >= 0.01 else f"{share:.1%}"


def counted(n: int, noun: str) -> str:
    """'1 thread', '2,048 threads'."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
