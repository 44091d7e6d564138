"""Finding a target sequence in a prompt in time linear in the prompt, whatever the target.

Comparing the target at every position costs ``len(prompt) * len(target)``: a prompt of 30k
repeated tokens and a 500-token target that differs only in its last token makes that 15 million
comparisons per search, and the placement loop searches once per item. Here token sequences are
searched with Knuth-Morris-Pratt, which never re-reads a prompt token, and each target is scanned
at most once per placement pass, lazily, as the cursor moves forward (:class:`OccurrenceScanner`).
Text is searched with ``str.find``, whose two-way algorithm is linear for long needles and whose
cost for short needles is bounded by their (small) length.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

Haystack = str | Sequence[int]


def _failure_table(needle: Sequence[int]) -> list[int]:
    """``table[i]``: the length of the longest proper prefix of ``needle[:i + 1]`` that is also
    its suffix."""
    table = [0] * len(needle)
    matched = 0
    for i in range(1, len(needle)):
        while matched and needle[i] != needle[matched]:
            matched = table[matched - 1]
        if needle[i] == needle[matched]:
            matched += 1
        table[i] = matched
    return table


def _iter_token_occurrences(
    haystack: Sequence[int], needle: Sequence[int], start: int
) -> Iterator[int]:
    table = _failure_table(needle)
    needle_len = len(needle)
    first = needle[0]
    haystack_len = len(haystack)
    matched = 0
    i = start
    while i < haystack_len:
        if matched == 0:
            # Nothing matched yet: jump to the next possible first token at C speed. KMP would
            # step there one token at a time, so this changes the constant, not the bound.
            try:
                i = haystack.index(first, i)
            except ValueError:
                return
            matched = 1
        else:
            token = haystack[i]
            while matched and token != needle[matched]:
                matched = table[matched - 1]
            if token == needle[matched]:
                matched += 1
        i += 1
        if matched == needle_len:
            yield i - needle_len
            matched = table[matched - 1]


def _iter_text_occurrences(haystack: str, needle: str, start: int) -> Iterator[int]:
    found = haystack.find(needle, start)
    while found != -1:
        yield found
        found = haystack.find(needle, found + 1)


def iter_occurrences(haystack: Haystack, needle: Haystack, start: int = 0) -> Iterator[int]:
    """Yield, in increasing order, every index ``>= start`` where ``needle`` occurs in ``haystack``.

    Overlapping occurrences are all reported. An empty needle occurs nowhere: an empty match
    would let one target stand for any number of items.
    """
    if len(needle) == 0:
        return iter(())
    if isinstance(haystack, str) != isinstance(needle, str):
        raise TypeError("haystack and needle must both be text or both be token ids")
    if isinstance(haystack, str):
        assert isinstance(needle, str)
        return _iter_text_occurrences(haystack, needle, max(start, 0))
    assert not isinstance(needle, str)
    return _iter_token_occurrences(haystack, needle, max(start, 0))


def iter_disjoint_occurrences(
    haystack: Haystack, needle: Haystack, start: int = 0
) -> Iterator[int]:
    """As :func:`iter_occurrences`, but leftmost-first and without overlaps, as a scan that
    resumes after each match would find them."""
    resume_at = start
    for found in iter_occurrences(haystack, needle, start):
        if found >= resume_at:
            yield found
            resume_at = found + len(needle)


class OccurrenceScanner:
    """The occurrences of one needle in one haystack, found lazily, for a cursor that only advances.

    The placement loop asks, item after item, for the first occurrence at or after a bound that
    never decreases; the scanner therefore reads each haystack element at most once over the
    whole loop, however many items share the needle.
    """

    def __init__(self, haystack: Haystack, needle: Haystack, start: int = 0) -> None:
        self._occurrences = iter_occurrences(haystack, needle, start)
        self._head: int | None = None
        self._exhausted = False

    def first_at_or_after(self, bound: int) -> int | None:
        """The first occurrence at ``bound`` or later; earlier ones are dropped for good."""
        while not self._exhausted and (self._head is None or self._head < bound):
            self._head = next(self._occurrences, None)
            if self._head is None:
                self._exhausted = True
        return None if self._exhausted else self._head
