"""Responsibility: counts in messages (`count_of`), for every layer that writes one."""

from __future__ import annotations

_PLURALS = {"memory": "memories", "entity": "entities", "config": "config keys", "entry": "entries",
            "full-text entry": "full-text entries", "match": "matches"}


def count_of(n: int, noun: str) -> str:
    """`1 memory`, `2 memories`, `1,500 tokens`: a count with its noun in the right number (English).
    Every message that counts something uses it (CLI, MCP, handlers, store checks)."""
    return f"{n:,} {noun if n == 1 else _PLURALS.get(noun, noun + 's')}"
