"""Property tests: framed structures hash equal exactly when vLLM's encoding says they are equal.

``canon`` restates that encoding's notion of equality without the hasher: leaves are their raw
bytes (so ``"a"`` equals ``b"a"`` and ``1`` its eight little-endian bytes), lists equal tuples,
dict keys count as ``str(key)`` and in order.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mediaref.hasher import MultiModalHasher


def H(**kwargs: Any) -> str:
    return MultiModalHasher.hash_kwargs("blake3", **kwargs)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.binary(max_size=6),
)

arrays = hnp.arrays(
    dtype=st.sampled_from([np.uint8, np.int32, np.float32, np.float64]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
)

keys = st.one_of(st.text(max_size=4), st.integers(-3, 3))

values = st.recursive(
    st.one_of(scalars, arrays),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=12,
)


def canon(value: Any) -> Any:
    """A structural identity independent of the hasher, with vLLM's equalities."""
    if value is None:
        return ("none",)
    if isinstance(value, (bool, int, float)):
        return ("leaf", np.array(value).tobytes())
    if isinstance(value, str):
        return ("leaf", value.encode())
    if isinstance(value, bytes):
        return ("leaf", value)
    if isinstance(value, np.ndarray):
        data = canon(value.item()) if value.ndim == 0 else ("leaf", value.tobytes())
        return ("ndarray", value.dtype.str, canon(value.shape), data)
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(canon(v) for v in value))
    if isinstance(value, dict):
        return ("map", tuple((str(k), canon(v)) for k, v in value.items()))
    raise TypeError(type(value))


@settings(max_examples=300, deadline=None)
@given(values, values)
def test_hashes_agree_exactly_when_structures_agree(a: Any, b: Any) -> None:
    assert (H(x=a) == H(x=b)) == (canon(a) == canon(b))


@settings(max_examples=200, deadline=None)
@given(values)
def test_a_value_hashes_like_its_rebuilt_copy(a: Any) -> None:
    def rebuild(value: Any) -> Any:
        if isinstance(value, dict):  # a fresh dict: same entries, same order
            return {k: rebuild(v) for k, v in value.items()}
        if isinstance(value, list):  # a list and a tuple of the same elements hash alike
            return tuple(rebuild(v) for v in value)
        if isinstance(value, tuple):
            return [rebuild(v) for v in value]
        if isinstance(value, np.ndarray):
            return value.copy()
        return value

    assert H(x=a) == H(x=rebuild(a))


@st.composite
def repartitions(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Two lists of strings with the same concatenation."""
    parts = draw(st.lists(st.text(alphabet="ab", max_size=3), max_size=5))
    joined = "".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(joined)), max_size=5)))
    bounds = [0, *cuts, len(joined)]
    return parts, [joined[i:j] for i, j in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(repartitions())
def test_content_cannot_move_across_item_boundaries(pair: tuple[list[str], list[str]]) -> None:
    a, b = pair
    assert (H(x=a) == H(x=b)) == (a == b)
    as_dict_a = {f"k{i}": v for i, v in enumerate(a)}
    as_dict_b = {f"k{i}": v for i, v in enumerate(b)}
    assert (H(**as_dict_a) == H(**as_dict_b)) == (as_dict_a == as_dict_b)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(alphabet="ab.", max_size=4), st.integers(0, 2), max_size=4))
def test_dotted_keys_never_equal_their_nesting(flat: dict[str, int]) -> None:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        head, _, tail = key.partition(".")
        if tail:
            nested.setdefault(head, {})
            if isinstance(nested[head], dict):
                nested[head][tail] = value
        else:
            nested.setdefault(head, value)
    assert (H(x=flat) == H(x=nested)) == (canon(flat) == canon(nested))
