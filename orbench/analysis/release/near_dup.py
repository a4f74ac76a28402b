"""Near-duplicate prompts by word-set Jaccard similarity, in input order, keeping the first.

A prompt is a near-duplicate when its token set (``orbench.analysis.stats.tokens``) has Jaccard
similarity >= ``threshold`` with an earlier prompt that was itself kept. ``near_duplicate_of``
answers this exactly and fast; ``near_duplicate_of_reference`` answers it by comparing every
prompt with every earlier kept prompt, and is there to check the fast one against.

The fast path is an exact similarity join, so it returns what the all-pairs comparison returns,
pair for pair. Only candidates that the filters below cannot rule out are compared:

* Tokens are ranked rarest first over the whole input and each set is sorted by that rank.
  Two sets of sizes n and m with Jaccard >= t share at least ``ceil(t * max(n, m))`` tokens, so
  their first k shared tokens lie in the first ``n - ceil(t * n) + k`` tokens of each (prefix
  filtering). Only kept prompts are indexed.
* Signatures: a rare token of the prefix (k = 1) stands alone; a frequent one (seen more than a
  limit chosen from the input) is paired with each later token of the prefix grown by one
  (k = 2), since one common word alone would make every prompt of a template a candidate for
  every other. Sets too small to need two shared tokens (at most ``(1 + t) / t - 1`` tokens) also
  index their frequent tokens alone.
* Each signature's entries are grouped by (set size, position of the signature's last token). If
  that token sits at position i of the query (size n) and q of the other set (size m), the
  overlap is at most ``k - 1 + min(n - i, m - q)``; a whole group is skipped when that bound or
  the size ratio rules out the needed overlap ``ceil(t * (n + m) / (1 + t))``. Prompts of one
  template have equal sizes and positions, so they pass or fail together.
* Every candidate left is checked with the reference's own comparison
  (``|a & b| / |a | b| >= threshold - 1e-12``), earliest first; the filters use a threshold a
  hair below the real one, so they never drop a pair the check would accept.

A prompt with no word tokens at all (emoji or punctuation only) is never a near-duplicate and
never has one: word-set similarity says nothing about it, and the exact and normalised-text
deduplication before this step already handle its copies.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from orbench.analysis.stats import tokens

_EPS = 1e-12    # the reference comparison's tolerance
_SLACK = 1e-9   # the filters use threshold - _SLACK, so they never drop a pair the check accepts
_PAIR_BUDGET = 4_000_000  # most token-pair signatures to create (memory)


def _check_threshold(threshold: float) -> None:
    if not 0 < threshold <= 1:
        raise ValueError(f"near-duplicate threshold must be in (0, 1], got {threshold!r}")


def _rare_limit(prefix_freqs: list[list[int]]) -> float:
    """Pick the frequency up to which a token is "rare" (single-token index) rather than "frequent" (pairs).

    Rough cost in candidate checks: each rare prefix token brings up to its frequency in candidates;
    each pair of frequent prefix tokens costs a look-up and a stored entry. The cheapest power of two
    (or no pairs at all) within a memory budget of pair entries wins.
    """
    single: Counter = Counter()   # frequency -> summed over sets: prefix tokens with that frequency
    paired: Counter = Counter()   # frequency -> pairs whose first token has that frequency
    for freqs in prefix_freqs:
        p2 = len(freqs)
        for j, f in enumerate(freqs):
            single[f] += 1
            paired[f] += p2 - 1 - j
    top = max(single, default=1)
    best, best_cost = math.inf, sum(f * c for f, c in single.items())  # no pairs at all
    limit = 1
    while limit < top:
        cost_single = sum(f * c for f, c in single.items() if f <= limit)
        pairs = sum(c for f, c in paired.items() if f > limit)
        cost = cost_single + 2 * pairs
        if pairs <= _PAIR_BUDGET and cost < best_cost:
            best, best_cost = limit, cost
        limit *= 2
    return best


def _candidates(index: dict, signatures: list[tuple[int, int]], n: int, t: float, share: float) -> set[int]:
    """Kept texts sharing a signature with a set of ``n`` tokens whose size and decisive position
    still allow a Jaccard of ``t`` (the prefix-filter bound)."""
    lo, hi = t * n, n / t
    candidates: set[int] = set()
    for sig, pos in signatures:
        groups = index.get(sig)
        if not groups:
            continue
        rest = n - pos
        for (m, q), members in groups.items():
            if lo <= m <= hi and min(rest, m - q) >= math.ceil(share * (n + m)):
                candidates.update(members)
    return candidates


def _first_match(s: frozenset[str], sets: list[frozenset[str]], candidates: set[int], threshold: float) -> int | None:
    """The earliest candidate whose token Jaccard with ``s`` reaches ``threshold``, or None."""
    floor = threshold - _EPS
    for j in sorted(candidates):
        other = sets[j]
        common = len(s & other)
        if common / (len(s) + len(other) - common) >= floor:
            return j
    return None


def near_duplicate_of(texts: Sequence[str], threshold: float, *, rare_limit: float | None = None) -> list[int | None]:
    """For each text in order: the index of the earliest kept earlier text it is a near-duplicate of, or None.

    A text is kept when it is a near-duplicate of no earlier kept text. Exact: equal to
    ``near_duplicate_of_reference`` for every input. ``rare_limit`` (tokens seen at most this many
    times are indexed alone, others in pairs) only changes the speed; by default it is chosen from
    the input.
    """
    _check_threshold(threshold)
    sets = [tokens(t) for t in texts]
    freq = Counter(tok for s in sets for tok in s)
    order = sorted(freq, key=lambda tok: (freq[tok], tok))
    rank = {tok: r for r, tok in enumerate(order)}
    vocab = len(order)
    t = max(threshold - _SLACK, _SLACK)
    share = t / (1 + t)
    tiny = math.floor((1 + t) / t) - 1  # sets this small may match sharing a single token
    sorted_ranks = [sorted(rank[tok] for tok in s) for s in sets]
    if rare_limit is None:
        pair_prefixes = (rs[: len(rs) - math.ceil(t * len(rs)) + 2] for rs in sorted_ranks)
        rare_limit = _rare_limit([[freq[order[r]] for r in prefix] for prefix in pair_prefixes])
    rare_below = sum(1 for tok in order if freq[tok] <= rare_limit)  # ranks below this are rare
    # signature -> {(set size, position that decides the bound): [indices of kept texts]}
    # signatures: a rare token's rank r, or vocab + a * vocab + b for frequent a before b
    index: dict[int, dict[tuple[int, int], list[int]]] = {}
    out: list[int | None] = []
    for i, (s, ranks) in enumerate(zip(sets, sorted_ranks)):
        n = len(ranks)
        if n == 0:
            out.append(None)
            continue
        p1 = n - math.ceil(t * n) + 1
        p2 = min(n, p1 + 1)
        signatures = []  # (signature, position whose remaining length bounds the overlap)
        for pos in range(n if n <= tiny else p1):  # (for tiny sets p1 == n anyway)
            if ranks[pos] < rare_below or n <= tiny:
                signatures.append((ranks[pos], pos))
        for pos in range(p2):
            a = ranks[pos]
            if a >= rare_below:
                base = vocab + a * vocab
                for pos_b in range(pos + 1, p2):  # overlap <= 1 + common tokens from b on
                    signatures.append((base + ranks[pos_b], pos_b - 1))
        match = _first_match(s, sets, _candidates(index, signatures, n, t, share), threshold)
        out.append(match)
        if match is None:
            for sig, pos in signatures:
                index.setdefault(sig, {}).setdefault((n, pos), []).append(i)
    return out


def near_duplicates(texts: Sequence[str], threshold: float) -> list[bool]:
    """For each text in order: is it a near-duplicate (token Jaccard >= threshold) of an earlier kept one?"""
    return [j is not None for j in near_duplicate_of(texts, threshold)]


def near_duplicate_of_reference(texts: Sequence[str], threshold: float) -> list[int | None]:
    """The all-pairs answer of ``near_duplicate_of``: each text against every earlier kept text, in order.

    Quadratic; for tests and for measuring the fast path.
    """
    _check_threshold(threshold)
    kept: list[tuple[int, frozenset[str]]] = []
    out: list[int | None] = []
    for i, text in enumerate(texts):
        s = tokens(text)
        match = None
        for j, other in kept if s else ():
            if len(s & other) / len(s | other) >= threshold - _EPS:
                match = j
                break
        out.append(match)
        if match is None and s:
            kept.append((i, s))
    return out
