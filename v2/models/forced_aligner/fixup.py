"""The release's timestamp fix-up: the head's raw marker times -> a monotonic sequence, and word times.

Owns: `fix_timestamps` (the release's `fix_timestamp`: the first longest non-decreasing subsequence by the
O(n^2) DP is kept; each maximal block of other values becomes, with 1 or 2 values, the nearer kept
neighbour's value (ties to the left; the only neighbour at the sequence's ends: "snap", "snap_edge"), with 3
or more, the even steps between its neighbours ("interp") or the only neighbour's value ("fill_edge"); every
value truncated to an int), `fixup_branches` (which of those ran, for tests and diagnostics), and
`word_times` (marker pairs -> seconds, Python-rounded to 3 decimals). Plain Python on a few hundred values.
Must not know: tensors, the model, tokens, the runtime.
"""

from __future__ import annotations

from v2.events import WordTime

__all__ = ["WordTime", "fix_timestamps", "fixup_branches", "word_times"]


def _normal(values: list[float]) -> list[bool]:
    """Marks the first longest non-decreasing subsequence (the release's DP and tie rules)."""
    n = len(values)
    dp, parent = [1] * n, [-1] * n
    for i in range(1, n):
        for j in range(i):
            if values[j] <= values[i] and dp[j] + 1 > dp[i]:
                dp[i], parent[i] = dp[j] + 1, j
    normal = [False] * n
    idx = dp.index(max(dp))
    while idx != -1:
        normal[idx], idx = True, parent[idx]
    return normal


def _fix(values: list[float]) -> tuple[list[int], list[str]]:
    n = len(values)
    if n == 0:
        return [], []
    normal = _normal(values)
    out, branches = list(values), []
    i = 0
    while i < n:
        if normal[i]:
            i += 1
            continue
        j = i
        while j < n and not normal[j]:
            j += 1
        left = next((values[k] for k in range(i - 1, -1, -1) if normal[k]), None)
        right = next((values[k] for k in range(j, n) if normal[k]), None)
        edge = left is None or right is None
        if j - i <= 2:
            for k in range(i, j):
                if left is None or (right is not None and k - (i - 1) > j - k):
                    out[k] = right  # type: ignore[assignment]  # one of the two is present: the LIS is not empty
                else:
                    out[k] = left
            branches.append("snap_edge" if edge else "snap")
        elif left is not None and right is not None:
            step = (right - left) / (j - i + 1)
            for k in range(i, j):
                out[k] = left + step * (k - i + 1)
            branches.append("interp")
        else:
            fill = left if left is not None else right
            for k in range(i, j):
                out[k] = fill  # type: ignore[assignment]
            branches.append("fill_edge")
        i = j
    return [int(v) for v in out], branches


def fix_timestamps(raw_ms: list[float]) -> list[int]:
    """The release's `fix_timestamp` over raw marker times (ms) -> fixed times (ms, int)."""
    return _fix(list(raw_ms))[0]


def fixup_branches(raw_ms: list[float]) -> list[str]:
    """The branch each repaired block took, left to right ("snap", "snap_edge", "interp", "fill_edge")."""
    return _fix(list(raw_ms))[1]


def word_times(words: list[str], fixed_ms: list[int]) -> list[WordTime]:
    """Word i spans markers 2i (start) and 2i + 1 (end): seconds, rounded to 3 decimals as the release does."""
    if len(fixed_ms) != 2 * len(words):
        raise ValueError(f"fixed_ms: {len(fixed_ms)} marker times for {len(words)} words (2 per word expected)")
    return [WordTime(w, round(fixed_ms[2 * i] / 1000, 3), round(fixed_ms[2 * i + 1] / 1000, 3))
            for i, w in enumerate(words)]
