"""The heap trim hands freed memory back: what keeps an idle operator's RSS near what it holds."""

from __future__ import annotations

from pathlib import Path

from dtjob import heap


def rss_kib() -> int:
    status = Path("/proc/self/status").read_text().splitlines()
    line = next(entry for entry in status if entry.startswith("VmRSS:"))
    return int(line.split()[1])


def test_trimming_returns_the_free_pages_between_live_objects() -> None:
    assert heap._LIBC is not None, "this Debian machine has glibc"
    # 1 KiB objects come from malloc, not pymalloc. Keeping every 16th one pins the heap's top, so
    # freeing the rest leaves holes that only a trim gives back.
    blocks = [bytes(1024) + bytes([i % 256]) for i in range(160_000)]
    kept = blocks[::16]
    del blocks
    before = rss_kib()
    heap.trim()
    after = rss_kib()
    assert before - after > 60_000, (before, after)  # most of the ~150 MiB freed
    assert len(kept) == 10_000
