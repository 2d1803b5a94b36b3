"""Giving a test's memory back before the next test on the same worker starts.

An xdist worker runs hundreds of tests in one process. A test that trains in-process leaves
its tensors in reference cycles (freed only at the next full collection) and glibc keeps the
freed pages in its arenas: a worker measured at 9.6 GB after the embedded model's training
test, where that test alone peaks at 4 GB, so Ray's memory monitor killed the actors of a
verl run on the other worker. After such a test, a full collection and `malloc_trim` give the
pages back to the system (measured: 2.6 GB → 0.44 GB after that test).

Only after such a test: a full collection in a worker holding torch, transformers and verl
takes about a second (440,000 objects), and after each of 1,500 tests that is most of an
extra quarter of an hour.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from pathlib import Path

import pytest

# A test that left this much more resident memory than it found gets the full treatment.
GREW_MB = 256
RSS_BEFORE = pytest.StashKey[int]()


def anonymous_rss_mb() -> int | None:
    """This process's resident anonymous memory (heap, not mapped files), or None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def give_memory_back() -> None:
    """Collect cycles, then return glibc's free pages to the system (where libc is glibc)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name is None:
        return
    libc = ctypes.CDLL(name)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def note_memory(item: pytest.Item) -> None:
    held = anonymous_rss_mb()
    if held is not None:
        item.stash[RSS_BEFORE] = held


def release_if_grown(item: pytest.Item, grew_mb: int = GREW_MB) -> None:
    before, after = item.stash.get(RSS_BEFORE, None), anonymous_rss_mb()
    if before is not None and after is not None and after - before > grew_mb:
        give_memory_back()
