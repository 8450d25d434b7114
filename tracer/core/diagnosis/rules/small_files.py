"""small_files: the data set is many small files (per-file overhead dominates).

Thresholds: small_files_min_count (files read, at least), small_file_bytes (their median bytes
read, below). Judged only when a loop waits on its reads; severity half of that (at least 20)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding
from tracer.core.diagnosis.rules.context import Context


def judge(ctx: Context) -> list[Finding]:
    t, sev = ctx.thresholds, ctx.io_severity()
    if sev is None:
        return []
    sizes, in_folder = defaultdict(int), defaultdict(int)  # path -> bytes, folder's files
    for r in ctx.reads:
        for key, n in r.files.items():
            sizes[key[0]] += n
        for key, n in r.folder_files.items():
            in_folder[key[0]] += n
    # a folder row's files count as files of its average size
    weighted = sorted((n // in_folder[p], in_folder[p]) if p in in_folder else (n, 1)
                      for p, n in sizes.items() if in_folder.get(p, 1))
    n_files = sum(w for _, w in weighted)
    if n_files < t.small_files_min_count:
        return []
    # the size of file n_files // 2 in size order (the upper median)
    median = next(size for size, upto in _cumulative(weighted) if upto > n_files // 2)
    if median >= t.small_file_bytes:
        return []
    return [Finding(
        "small_files", max(20, sev // 2), None, words.small_files(n_files, median),
        {"files": n_files, "median_bytes_per_file": median,
         "opens": sum(r.opens for r in ctx.reads)})]


def _cumulative(weighted: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """(value, weights up to and with it) of sorted (value, weight) pairs."""
    total = 0
    for value, w in weighted:
        total += w
        yield value, total
