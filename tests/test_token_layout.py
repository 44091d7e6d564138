"""``TokenLayout``: a prompt as text and media spans; expanded ids, placeholder offsets and
positions derive from it, and it is recovered from an expanded prompt or a processor's output."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mediaref.inputs import PlaceholderRange
from mediaref.processing import MediaSpan, TextSpan, TokenLayout

IMAGE, VIDEO, BREAK = 401, 402, 390  # placeholder ids and an interleaved row-break marker
PLACEHOLDERS = {"image": IMAGE, "video": VIDEO}


def _mixed() -> TokenLayout:
    return TokenLayout(
        [
            TextSpan((1, 2)),
            MediaSpan.repeat("image", IMAGE, 3),
            TextSpan((5,)),
            MediaSpan.sequence("video", [VIDEO, VIDEO, BREAK, VIDEO], embed_token_id=VIDEO),
            TextSpan((6, 7)),
        ]
    )


# -- expansion, offsets, positions -----------------------------------------------------------------


def test_expansion_offsets_and_placeholders_derive_from_the_spans() -> None:
    layout = _mixed()
    assert layout.token_ids() == [1, 2, IMAGE, IMAGE, IMAGE, 5, VIDEO, VIDEO, BREAK, VIDEO, 6, 7]
    assert len(layout) == layout.num_tokens == 12
    assert layout.offsets == (0, 2, 5, 6, 10)
    placeholders = layout.placeholders()
    assert placeholders == {
        "image": [PlaceholderRange(offset=2, length=3)],
        "video": [
            PlaceholderRange(offset=6, length=4, is_embed=torch.tensor([True, True, False, True]))
        ],
    }
    assert placeholders["image"][0].is_embed is None  # a repeated placeholder: every token embeds
    assert placeholders["video"][0].get_num_embeds() == 3
    assert [offset for offset, _ in layout.media_spans()] == [2, 6]
    assert [span.modality for _, span in layout.media_spans("video")] == ["video"]
    types = layout.mm_token_type_ids({"image": 1, "video": 2})
    assert types == [0, 0, *[1] * 3, 0, *[2] * 4, 0, 0]
    assert torch.equal(layout.positions(), torch.arange(12))


def test_empty_text_is_dropped_and_adjacent_text_merged() -> None:
    built = TokenLayout(
        [TextSpan(()), TextSpan((1,)), TextSpan((2,)), MediaSpan.repeat("image", IMAGE, 1)]
    )
    assert built.spans == (TextSpan((1, 2)), MediaSpan.repeat("image", IMAGE, 1))
    assert built == TokenLayout([TextSpan((1, 2)), MediaSpan.repeat("image", IMAGE, 1)])
    empty = TokenLayout([])
    assert len(empty) == 0 and empty.token_ids() == [] and empty.placeholders() == {}


def test_adjacent_items_stay_two_items() -> None:
    layout = TokenLayout([MediaSpan.repeat("image", IMAGE, 2), MediaSpan.repeat("image", IMAGE, 3)])
    assert layout.placeholders()["image"] == [
        PlaceholderRange(offset=0, length=2),
        PlaceholderRange(offset=2, length=3),
    ]


def test_a_repeated_span_is_not_expanded_until_asked() -> None:
    span = MediaSpan.repeat("video", VIDEO, 10**9)
    assert span.token_ids is None and span.num_embeds == 10**9 and span.is_repeat
    assert TokenLayout([TextSpan((1,)), span]).num_tokens == 10**9 + 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"length": 0, "placeholder_id": IMAGE}, "at least one token"),
        ({"length": 2}, "exactly one"),
        ({"length": 2, "placeholder_id": IMAGE, "token_ids": (IMAGE, IMAGE)}, "exactly one"),
        ({"length": 3, "token_ids": (IMAGE, IMAGE)}, "2 token ids"),
        ({"length": 2, "placeholder_id": IMAGE, "embed_mask": (True, True)}, "explicit"),
        ({"length": 2, "token_ids": (IMAGE, BREAK), "embed_mask": (True,)}, "1 mask flags"),
        ({"length": 1, "token_ids": (BREAK,), "embed_mask": (False,)}, "at least one embedding"),
    ],
)
def test_malformed_media_spans_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MediaSpan("image", **kwargs)


def test_sequence_masks_by_id_or_by_flags_and_drops_an_all_true_mask() -> None:
    by_id = MediaSpan.sequence("image", [BREAK, IMAGE, IMAGE], embed_token_id=IMAGE)
    by_flags = MediaSpan.sequence("image", [BREAK, IMAGE, IMAGE], embed_mask=[False, True, True])
    assert by_id == by_flags and by_id.num_embeds == 2
    assert by_id.is_embed() is not None
    assert torch.equal(by_id.is_embed(), torch.tensor([False, True, True]))
    everything = MediaSpan.sequence("image", [IMAGE, BREAK], embed_mask=[True, True])
    assert everything.embed_mask is None and everything.is_embed() is None
    with pytest.raises(ValueError, match="not both"):
        MediaSpan.sequence("image", [IMAGE], embed_token_id=IMAGE, embed_mask=[True])


def test_only_spans_make_a_layout() -> None:
    with pytest.raises(TypeError, match="TextSpan and MediaSpan"):
        TokenLayout([[1, 2, 3]])  # type: ignore[list-item]


# -- from an expanded prompt -------------------------------------------------------------------------


def test_from_token_ids_takes_each_run_as_an_item_or_cuts_runs_by_item_lengths() -> None:
    ids = [1, IMAGE, IMAGE, IMAGE, IMAGE, IMAGE, 2, VIDEO, VIDEO]
    whole_runs = TokenLayout.from_token_ids(ids, PLACEHOLDERS)
    assert [len(span) for _, span in whole_runs.media_spans()] == [5, 2]
    cut = TokenLayout.from_token_ids(
        ids, PLACEHOLDERS, item_lengths={"image": [2, 3], "video": [2]}
    )
    assert cut.placeholders() == {
        "image": [PlaceholderRange(offset=1, length=2), PlaceholderRange(offset=3, length=3)],
        "video": [PlaceholderRange(offset=7, length=2)],
    }
    assert cut.token_ids() == ids


@pytest.mark.parametrize(
    ("item_lengths", "match"),
    [
        ({"image": [2, 2], "video": [2]}, "not a whole number"),  # the run of 5 splits as 2+2+?
        ({"image": [5], "video": [1]}, "not a whole number"),
        ({"image": [5]}, "not a whole number"),  # no lengths for the video run
        ({"image": [5, 1], "video": [2]}, "without placeholder tokens"),  # an item never placed
    ],
)
def test_from_token_ids_refuses_runs_and_lengths_that_disagree(
    item_lengths: dict[str, list[int]], match: str
) -> None:
    ids = [1, IMAGE, IMAGE, IMAGE, IMAGE, IMAGE, 2, VIDEO, VIDEO]
    with pytest.raises(ValueError, match=match):
        TokenLayout.from_token_ids(ids, PLACEHOLDERS, item_lengths=item_lengths)


def test_two_modalities_may_not_share_a_placeholder_id() -> None:
    with pytest.raises(ValueError, match="share a placeholder id"):
        TokenLayout.from_token_ids([IMAGE], {"image": IMAGE, "video": IMAGE})


# -- from a processor's output -------------------------------------------------------------------------


def test_from_placeholders_recovers_repeats_and_interleaved_items() -> None:
    layout = _mixed()
    recovered = TokenLayout.from_placeholders(layout.token_ids(), layout.placeholders())
    assert recovered == layout
    assert recovered.spans[1] == MediaSpan.repeat("image", IMAGE, 3)


def test_a_range_without_a_mask_over_mixed_ids_is_an_explicit_all_embedding_span() -> None:
    layout = TokenLayout.from_placeholders(
        [1, IMAGE, BREAK, 2], {"image": [PlaceholderRange(offset=1, length=2)]}
    )
    span = layout.spans[1]
    assert isinstance(span, MediaSpan)
    assert span.token_ids == (IMAGE, BREAK) and span.embed_mask is None
    assert layout.placeholders() == {"image": [PlaceholderRange(offset=1, length=2)]}


@pytest.mark.parametrize(
    "ranges",
    [
        [PlaceholderRange(offset=1, length=3), PlaceholderRange(offset=3, length=1)],  # overlap
        [PlaceholderRange(offset=4, length=2)],  # leaves the prompt
        [PlaceholderRange(offset=1, length=0)],  # holds nothing
    ],
)
def test_from_placeholders_refuses_overlapping_or_outside_ranges(
    ranges: list[PlaceholderRange],
) -> None:
    with pytest.raises(ValueError, match="overlaps another or leaves"):
        TokenLayout.from_placeholders([1, IMAGE, IMAGE, IMAGE, 2], {"image": ranges})


# -- round trips on generated layouts ---------------------------------------------------------------

_text = st.lists(st.integers(0, 300), max_size=4).map(lambda ids: TextSpan(tuple(ids)))
_repeat = st.builds(
    MediaSpan.repeat, st.sampled_from(["image", "video"]), st.just(0), st.integers(1, 40)
).map(lambda span: MediaSpan.repeat(span.modality, PLACEHOLDERS[span.modality], span.length))
_interleaved = st.tuples(
    st.sampled_from(["image", "video"]), st.lists(st.booleans(), min_size=2, max_size=12)
).filter(lambda case: any(case[1]) and not all(case[1]))


def _sequence(case: tuple[str, list[bool]]) -> MediaSpan:
    modality, flags = case
    ids = [PLACEHOLDERS[modality] if flag else BREAK for flag in flags]
    return MediaSpan.sequence(modality, ids, embed_token_id=PLACEHOLDERS[modality])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_text, _repeat), max_size=12))
def test_expanded_ids_split_back_into_the_same_layout(spans: list[TextSpan | MediaSpan]) -> None:
    layout = TokenLayout(spans)
    lengths = {
        modality: [span.length for _, span in layout.media_spans(modality)]
        for modality in PLACEHOLDERS
    }
    ids = layout.token_ids()
    assert TokenLayout.from_token_ids(ids, PLACEHOLDERS, item_lengths=lengths) == layout
    assert TokenLayout.from_placeholders(ids, layout.placeholders()) == layout
    assert len(ids) == len(layout) == sum(len(span) for span in layout.spans)
    for modality, ranges in layout.placeholders().items():
        for placeholder in ranges:
            run = ids[placeholder.offset : placeholder.offset + placeholder.length]
            assert run == [PLACEHOLDERS[modality]] * placeholder.length


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_text, _repeat, _interleaved.map(_sequence)), max_size=10))
def test_placeholders_with_masks_rebuild_the_layout(spans: list[TextSpan | MediaSpan]) -> None:
    layout = TokenLayout(spans)
    placeholders = layout.placeholders()
    assert TokenLayout.from_placeholders(layout.token_ids(), placeholders) == layout
    for ranges in placeholders.values():
        for placeholder in ranges:
            embeds = layout.token_ids()[
                placeholder.offset : placeholder.offset + placeholder.length
            ]
            assert placeholder.get_num_embeds() == sum(token != BREAK for token in embeds)
