"""Prompt updates: where each item's placeholder tokens land, the text fallback, linear matching,
and resolved updates as cacheable values."""

from __future__ import annotations

import gc
import pickle
import sys
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from mediaref.exceptions import VLLMValidationError
from mediaref.inputs import PlaceholderRange
from mediaref.processing._prompt.codec import PromptCodec
from mediaref.processing._prompt.matching import (
    OccurrenceScanner,
    iter_disjoint_occurrences,
    iter_occurrences,
)
from mediaref.processing._prompt.placement import locate_placeholders, place_updates
from mediaref.processing.prompt_updates import (
    PromptIndexTargets,
    PromptInsertion,
    PromptReplacement,
    PromptTargetMatch,
    PromptUpdate,
    PromptUpdateDetails,
    ResolvedPromptUpdate,
    UpdateMode,
    apply_prompt_updates,
    find_mm_placeholders,
    resolve_prompt_updates,
)

SPECIAL_TOKENS = ["<s>", "<image>", "<video>", "<|vs|>", "<|ve|>"]


def _build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE whose merges make "food" one token, so "foo" is not in its token ids."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    merges = [("f", "o"), ("fo", "o"), ("foo", "d")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(tokenizer_object=backend)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return _build_tokenizer()


def found_ranges(token_ids: Sequence[int], updates: Any) -> dict[str, list[PlaceholderRange]]:
    """vLLM's ``find_mm_placeholders``, each placeholder as its range."""
    found = find_mm_placeholders(token_ids, updates)
    return {m: [info.to_range() for info in infos] for m, infos in found.items()}


def ids_of(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


class CountingTokenizer:
    """A real tokenizer behind a counter of the pieces it was asked to encode."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.encoded: Counter[str] = Counter()

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.encoded[text] += 1
        return self.inner.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, token_ids: list[int]) -> str:
        return self.inner.decode(token_ids)


class ReadCountingList(list):  # type: ignore[type-arg]
    """A prompt that counts the elements read from it, including inside ``index`` scans."""

    reads = 0

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        self.reads += len(value) if isinstance(key, slice) else 1
        return value

    def index(self, value: Any, start: Any = 0, stop: Any = sys.maxsize) -> int:
        try:
            found = super().index(value, start, stop)
        except ValueError:
            self.reads += max(0, min(stop, len(self)) - start)
            raise
        self.reads += found - start + 1
        return found


def resolve(
    updates: Sequence[PromptUpdate], **counts: int
) -> dict[str, list[tuple[ResolvedPromptUpdate, ...]]]:
    return resolve_prompt_updates(updates, counts)


def naive_occurrences(haystack: Sequence[Any], needle: Sequence[Any], start: int = 0) -> list[int]:
    n = len(needle)
    return [i for i in range(max(start, 0), len(haystack) - n + 1) if haystack[i : i + n] == needle]


def naive_disjoint(haystack: Sequence[Any], needle: Sequence[Any], start: int = 0) -> list[int]:
    found, i, n = [], max(start, 0), len(needle)
    while i <= len(haystack) - n:
        if haystack[i : i + n] == needle:
            found.append(i)
            i += n
        else:
            i += 1
    return found


# --- matching ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    haystack=st.lists(st.integers(0, 2), max_size=40),
    needle=st.lists(st.integers(0, 2), min_size=1, max_size=6),
    start=st.integers(-2, 45),
)
def test_token_occurrences_match_naive_reference(
    haystack: list[int], needle: list[int], start: int
) -> None:
    assert list(iter_occurrences(haystack, needle, start)) == naive_occurrences(
        haystack, needle, start
    )
    assert list(iter_disjoint_occurrences(haystack, needle, start)) == naive_disjoint(
        haystack, needle, start
    )


@st.composite
def _needle_and_haystack(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """A needle and a haystack stitched from its prefixes and itself: near-misses and overlaps
    are where a wrong failure table loses occurrences, and random lists rarely contain them."""
    needle = draw(st.lists(st.integers(0, 1), min_size=1, max_size=8))
    chunks = st.one_of(
        st.just(needle),
        st.integers(1, len(needle)).map(lambda n: needle[:n]),
        st.lists(st.integers(0, 1), max_size=3),
    )
    haystack = [token for chunk in draw(st.lists(chunks, max_size=12)) for token in chunk]
    return needle, haystack


@settings(max_examples=500, deadline=None)
@given(case=_needle_and_haystack())
def test_token_occurrences_match_naive_reference_on_near_misses(
    case: tuple[list[int], list[int]],
) -> None:
    needle, haystack = case
    assert list(iter_occurrences(haystack, needle)) == naive_occurrences(haystack, needle)


@settings(max_examples=200, deadline=None)
@given(
    haystack=st.text(alphabet="ab<>", max_size=40),
    needle=st.text(alphabet="ab<>", min_size=1, max_size=5),
    start=st.integers(0, 45),
)
def test_text_occurrences_match_naive_reference(haystack: str, needle: str, start: int) -> None:
    assert list(iter_occurrences(haystack, needle, start)) == naive_occurrences(
        haystack, needle, start
    )
    assert list(iter_disjoint_occurrences(haystack, needle, start)) == naive_disjoint(
        haystack, needle, start
    )


def test_empty_needle_occurs_nowhere_and_kinds_must_agree() -> None:
    assert list(iter_occurrences([1, 2], [])) == []
    assert list(iter_occurrences("ab", "")) == []
    with pytest.raises(TypeError, match="both be text or both be token ids"):
        list(iter_occurrences("ab", [1]))


def test_scanner_serves_an_advancing_bound() -> None:
    scanner = OccurrenceScanner([1, 0, 1, 0, 1], [1])
    assert scanner.first_at_or_after(0) == 0
    assert scanner.first_at_or_after(0) == 0  # asking again does not consume
    assert scanner.first_at_or_after(1) == 2
    assert scanner.first_at_or_after(5) is None


def test_matching_reads_each_token_a_bounded_number_of_times() -> None:
    """[1]*30000 against [1]*500+[2]: a position-by-position comparison reads ~15M tokens."""
    haystack = ReadCountingList([1] * 30_000)
    assert list(iter_occurrences(haystack, [1] * 500 + [2])) == []
    assert haystack.reads <= 2 * len(haystack)


def test_placement_stays_linear_with_many_items_and_a_repetitive_prompt() -> None:
    target = [1] * 500 + [2]
    prompt = ReadCountingList(target * 60)  # 30,060 tokens, 60 occurrences
    updates = resolve([PromptReplacement("image", target, [3])], image=60)
    placement = place_updates(prompt, updates, PromptCodec(None))
    assert placement.prompt == [3] * 60
    assert prompt.reads <= 4 * len(prompt)


def test_locating_stays_linear_with_a_repetitive_prompt() -> None:
    content = [1] * 500 + [2]
    prompt = ReadCountingList([1] * 30_000 + content + [1] * 10 + content)
    updates = resolve([PromptReplacement("image", [9], content)], image=2)
    located = locate_placeholders(prompt, updates, PromptCodec(None))
    assert [p.offset for p in located.placed["image"]] == [30_000, 30_511]
    assert prompt.reads <= 4 * len(prompt)


@pytest.mark.timeout(10)
def test_adversarial_prompt_with_absent_target_fails_promptly() -> None:
    updates = resolve([PromptReplacement("image", [1] * 500 + [2], [3])], image=200)
    with pytest.raises(VLLMValidationError, match="expected 200 placeholder"):
        apply_prompt_updates([1] * 30_000, updates, None)


@pytest.mark.timeout(10)
def test_adversarial_prompt_with_many_items_applies_and_locates() -> None:
    target = [1] * 500 + [2]
    updates = resolve([PromptReplacement("image", target, [*target, 4])], image=60)
    new_ids, placeholders = apply_prompt_updates(target * 60, updates, None)
    assert len(new_ids) == 60 * 502
    assert [r.offset for r in placeholders["image"]] == [i * 502 for i in range(60)]
    assert found_ranges(new_ids, updates) == placeholders


# --- applying updates ------------------------------------------------------------------------


def test_replacement_replaces_successive_occurrences_with_per_item_content() -> None:
    updates = resolve([PromptReplacement("image", [9], lambda i: [7] * (i + 1))], image=3)
    new_ids, placeholders = apply_prompt_updates([1, 9, 2, 9, 3, 9, 9], updates, None)
    assert new_ids == [1, 7, 2, 7, 7, 3, 7, 7, 7, 9]
    assert placeholders == {
        "image": [PlaceholderRange(1, 1), PlaceholderRange(3, 2), PlaceholderRange(6, 3)]
    }


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 2), max_size=40),
    target=st.lists(st.integers(0, 2), min_size=1, max_size=4),
    sizes=st.lists(st.integers(0, 3), max_size=6),
)
def test_replacement_matches_naive_reference(
    prompt: list[int], target: list[int], sizes: list[int]
) -> None:
    updates = resolve(
        [PromptReplacement("image", target, lambda i: [9] * sizes[i])], image=len(sizes)
    )
    occurrences = naive_disjoint(prompt, target)
    if len(occurrences) < len(sizes):
        with pytest.raises(VLLMValidationError, match=f"expected {len(sizes)} placeholder"):
            apply_prompt_updates(prompt, updates, None)
        return
    expected: list[int] = []
    ranges, previous_end = [], 0
    for occurrence, size in zip(occurrences, sizes, strict=False):
        expected += prompt[previous_end:occurrence]
        ranges.append(PlaceholderRange(len(expected), size))
        expected += [9] * size
        previous_end = occurrence + len(target)
    expected += prompt[previous_end:]
    new_ids, placeholders = apply_prompt_updates(prompt, updates, None)
    assert (new_ids, placeholders) == (expected, {"image": ranges})
    if all(sizes):  # content 9 never occurs in the prompt: locating must agree with applying
        assert found_ranges(new_ids, updates) == {m: p for m, p in placeholders.items() if p}


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.lists(st.sampled_from([0, 7, 8]), max_size=30),
    images=st.integers(0, 4),
    videos=st.integers(0, 4),
)
def test_interleaved_modalities_follow_prompt_order(
    prompt: list[int], images: int, videos: int
) -> None:
    updates = resolve(
        [PromptReplacement("image", [7], [70, 71]), PromptReplacement("video", [8], [80])],
        image=images,
        video=videos,
    )
    if prompt.count(7) < images or prompt.count(8) < videos:
        with pytest.raises(VLLMValidationError):
            apply_prompt_updates(prompt, updates, None)
        return
    expected: list[int] = []
    ranges: dict[str, list[PlaceholderRange]] = {"image": [], "video": []}
    for token in prompt:
        if token == 7 and len(ranges["image"]) < images:
            ranges["image"].append(PlaceholderRange(len(expected), 2))
            expected += [70, 71]
        elif token == 8 and len(ranges["video"]) < videos:
            ranges["video"].append(PlaceholderRange(len(expected), 1))
            expected += [80]
        else:
            expected.append(token)
    assert apply_prompt_updates(prompt, updates, None) == (expected, ranges)
    # vLLM's find_mm_placeholders leaves out a modality with nothing found.
    assert found_ranges(expected, updates) == {m: found for m, found in ranges.items() if found}


@pytest.mark.parametrize(
    ("target", "expected_ids", "offset"),
    [
        (PromptIndexTargets.start(), [10, 11, 5, 6], 0),
        (PromptIndexTargets.prefix([5]), [5, 10, 11, 6], 1),
        (PromptIndexTargets.end(), [5, 6, 10, 11], 2),
        ([5], [5, 10, 11, 6], 1),
    ],
)
def test_insertion_puts_every_item_after_the_same_target(
    target: Any, expected_ids: list[int], offset: int
) -> None:
    updates = resolve([PromptInsertion("image", target, lambda i: [10 + i])], image=2)
    new_ids, placeholders = apply_prompt_updates([5, 6], updates, None)
    assert new_ids == expected_ids
    assert placeholders == {"image": [PlaceholderRange(offset, 1), PlaceholderRange(offset + 1, 1)]}


def test_insertion_after_a_repeated_token_uses_its_first_occurrence() -> None:
    updates = resolve([PromptInsertion("image", [1], lambda i: [10 + i])], image=2)
    assert apply_prompt_updates([1, 5, 1, 6], updates, None)[0] == [1, 10, 11, 5, 1, 6]


def test_index_targets_resolve_in_an_empty_prompt() -> None:
    for target in (PromptIndexTargets.start(), PromptIndexTargets.end()):
        updates = resolve([PromptInsertion("image", target, [4])], image=1)
        assert apply_prompt_updates([], updates, None) == ([4], {"image": [PlaceholderRange(0, 1)]})


def test_prefix_target_that_the_prompt_lacks_is_an_error() -> None:
    updates = resolve([PromptInsertion("image", PromptIndexTargets.prefix([7]), [4])], image=1)
    with pytest.raises(VLLMValidationError, match=r"image: expected 1 .* found 0 .*prefix"):
        apply_prompt_updates([5, 6], updates, None)


def test_text_prefix_is_matched_with_the_tokenizer(tokenizer: Any) -> None:
    prompt = ids_of(tokenizer, "<s>hi")
    updates = resolve(
        [PromptInsertion("image", PromptIndexTargets.prefix("<s>"), "<image>")], image=1
    )
    new_ids, placeholders = apply_prompt_updates(prompt, updates, tokenizer)
    assert new_ids == ids_of(tokenizer, "<s><image>hi")
    assert placeholders == {"image": [PlaceholderRange(1, 1)]}


def test_position_target_is_placed_before_a_replacement_starting_there() -> None:
    updates = resolve(
        [
            PromptReplacement("video", [5], [20]),
            PromptInsertion("image", PromptIndexTargets.start(), [10]),
        ],
        video=1,
        image=1,
    )
    new_ids, placeholders = apply_prompt_updates([5, 6], updates, None)
    assert new_ids == [10, 20, 6]
    assert placeholders == {"video": [PlaceholderRange(1, 1)], "image": [PlaceholderRange(0, 1)]}


@pytest.mark.parametrize("first", ["image", "video"])
def test_modalities_sharing_a_target_go_in_listed_order(first: str) -> None:
    second = "video" if first == "image" else "image"
    content = {"image": [10], "video": [20]}
    updates = resolve(
        [PromptReplacement(m, [7], content[m]) for m in (first, second)], **{first: 2, second: 1}
    )
    new_ids, placeholders = apply_prompt_updates([7, 7, 7], updates, None)
    assert new_ids == content[first] * 2 + content[second]
    assert [r.offset for r in placeholders[first]] == [0, 1]
    assert [r.offset for r in placeholders[second]] == [2]


def test_an_item_uses_whichever_alternative_update_is_found_first() -> None:
    updates = resolve(
        [PromptReplacement("image", [8], [80]), PromptReplacement("image", [7], [70])], image=2
    )
    assert apply_prompt_updates([7, 0, 8], updates, None)[0] == [70, 0, 80]


def test_replacement_and_insertion_of_different_modalities_combine() -> None:
    updates = resolve(
        [
            PromptInsertion("audio", PromptIndexTargets.end(), [30]),
            PromptReplacement("image", [7], lambda i: [10 + i] * 2),
        ],
        audio=1,
        image=2,
    )
    new_ids, placeholders = apply_prompt_updates([7, 1, 7], updates, None)
    assert new_ids == [10, 10, 1, 11, 11, 30]
    assert placeholders == {
        "audio": [PlaceholderRange(5, 1)],
        "image": [PlaceholderRange(0, 2), PlaceholderRange(3, 2)],
    }


def test_insertion_does_not_reuse_a_target_occurrence_a_replacement_consumed() -> None:
    updates = resolve(
        [PromptReplacement("image", [7], [10]), PromptInsertion("audio", [7], [30])],
        image=1,
        audio=1,
    )
    new_ids, placeholders = apply_prompt_updates([7, 1, 7], updates, None)
    assert new_ids == [10, 1, 7, 30]
    assert placeholders == {"image": [PlaceholderRange(0, 1)], "audio": [PlaceholderRange(3, 1)]}


def test_too_few_targets_names_each_modality_with_expected_and_found() -> None:
    updates = resolve(
        [PromptReplacement("image", [7], [1]), PromptReplacement("video", [8], [2])],
        image=3,
        video=2,
    )
    with pytest.raises(ValueError) as caught:
        apply_prompt_updates([7, 0, 8, 8], updates, None)
    message = str(caught.value)
    assert isinstance(caught.value, VLLMValidationError) and caught.value.status_code == 400
    assert "image: expected 3 placeholder(s) for 3 image item(s), found 1 (target [7])" in message
    assert "video" not in message  # the video items all found their targets


def test_too_few_text_targets_after_the_text_fallback_is_an_error(tokenizer: Any) -> None:
    updates = resolve([PromptReplacement("image", "foo", "<image>")], image=2)
    with pytest.raises(VLLMValidationError, match=r"image: expected 2 .* found 1 \(target 'foo'\)"):
        apply_prompt_updates(ids_of(tokenizer, "food and more"), updates, tokenizer)


# --- embeddings mask ---------------------------------------------------------------------------


def test_select_token_id_marks_the_embedded_positions() -> None:
    details = PromptUpdateDetails.select_token_id([100, 5, 5, 101], embed_token_id=5)
    updates = resolve([PromptReplacement("image", [9], details)], image=1)
    _, placeholders = apply_prompt_updates([0, 9], updates, None)
    (placeholder,) = placeholders["image"]
    assert (placeholder.offset, placeholder.length, placeholder.get_num_embeds()) == (1, 4, 2)
    assert placeholder.is_embed is not None
    assert placeholder.is_embed.tolist() == [False, True, True, False]


def test_select_token_ids_and_select_text(tokenizer: Any) -> None:
    by_ids = PromptUpdateDetails.select_token_ids([1, 2, 3, 2], [2, 3])
    mask = by_ids.embed_mask(PromptCodec(None), [1, 2, 3, 2])
    assert mask is not None and mask.tolist() == [False, True, True, True]

    by_text = PromptUpdateDetails.select_text("<|vs|><image><image><|ve|>", "<image>")
    updates = resolve([PromptReplacement("image", "<s>", by_text)], image=1)
    _, placeholders = apply_prompt_updates(ids_of(tokenizer, "<s>"), updates, tokenizer)
    assert placeholders["image"][0].is_embed.tolist() == [False, True, True, False]


def test_mask_is_none_when_every_token_embeds() -> None:
    for details in (
        PromptUpdateDetails.from_seq([5, 5]),
        PromptUpdateDetails.select_token_id([5, 5], 5),
    ):
        updates = resolve([PromptReplacement("image", [9], details)], image=1)
        assert apply_prompt_updates([9], updates, None)[1] == {"image": [PlaceholderRange(0, 2)]}


def test_custom_is_embed_receives_the_content_token_ids(tokenizer: Any) -> None:
    # vLLM's form: is_embed(full) -> mask; a text content is encoded first (mediaref extension).
    seen: list[Any] = []

    def is_embed(full: Any) -> torch.Tensor:
        seen.append(full)
        return torch.tensor([True, False])

    updates = resolve(
        [PromptReplacement("image", [9], PromptUpdateDetails("<image><s>", is_embed))], image=1
    )
    apply_prompt_updates([9], updates, tokenizer)
    assert seen == [ids_of(tokenizer, "<image><s>")]


def test_vllm_style_lambda_is_embed() -> None:
    details = PromptUpdateDetails(full=[7, 5, 5, 8], is_embed=lambda full: torch.tensor(full) == 5)
    updates = resolve([PromptReplacement("image", [5], details)], image=1)
    new_ids, placeholders = apply_prompt_updates([1, 5, 2], updates, None)
    assert new_ids == [1, 7, 5, 5, 8, 2]
    assert placeholders["image"][0].is_embed.tolist() == [False, True, True, False]


def test_is_embed_of_the_wrong_shape_is_rejected() -> None:
    details = PromptUpdateDetails([5, 5, 5], lambda full: torch.tensor([True, False]))
    updates = resolve([PromptReplacement("image", [9], details)], image=1)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        apply_prompt_updates([9], updates, None)


# --- text targets and the text fallback --------------------------------------------------------


def test_text_targets_and_contents_are_encoded_once_per_tokenizer(tokenizer: Any) -> None:
    counting = CountingTokenizer(tokenizer)
    updates = resolve(
        [PromptReplacement("image", "<image>", "<|vs|><image><image><|ve|>")], image=20
    )
    prompt = ids_of(tokenizer, "<image>" * 20)
    for _ in range(2):
        new_ids, placeholders = apply_prompt_updates(prompt, updates, counting)
    assert new_ids == ids_of(tokenizer, "<|vs|><image><image><|ve|>" * 20)
    assert [r.offset for r in placeholders["image"]] == list(range(0, 80, 4))
    assert counting.encoded == Counter({"<image>": 1, "<|vs|><image><image><|ve|>": 1})


def test_piece_cache_does_not_keep_the_tokenizer_alive(tokenizer: Any) -> None:
    counting = CountingTokenizer(tokenizer)
    PromptCodec(counting).token_ids("<image>")
    alive = weakref.ref(counting)
    del counting
    gc.collect()
    assert alive() is None


def test_text_fallback_applies_a_target_merged_with_its_neighbours(tokenizer: Any) -> None:
    prompt = ids_of(tokenizer, "<video>I like food")
    assert naive_occurrences(prompt, ids_of(tokenizer, "foo")) == []  # "food" is one token
    updates = resolve(
        [
            PromptReplacement(
                "image", "foo", PromptUpdateDetails.select_text("<|vs|><image><image>", "<image>")
            ),
            PromptReplacement("video", [ids_of(tokenizer, "<video>")[0]], "<video><video>"),
        ],
        image=1,
        video=1,
    )
    new_ids, placeholders = apply_prompt_updates(prompt, updates, tokenizer)
    assert new_ids == ids_of(tokenizer, "<video><video>I like <|vs|><image><image>d")
    image_offset = new_ids.index(ids_of(tokenizer, "<|vs|>")[0])
    assert placeholders["image"] == [
        PlaceholderRange(image_offset, 3, torch.tensor([False, True, True]))
    ]
    assert placeholders["video"] == [PlaceholderRange(0, 2)]


def test_a_processors_text_fallback_finds_placeholders_through_its_hook(tokenizer: Any) -> None:
    # vLLM's fallback finds what it applied through _find_mm_placeholders, which a model file may
    # override; mediaref's processor does too.
    from mediaref.processing.processor import BaseMultiModalProcessor

    class Info:
        def get_tokenizer(self) -> Any:
            return tokenizer

    calls: list[list[int]] = []

    class Processor(BaseMultiModalProcessor[Any]):
        def __init__(self) -> None:  # only the info's tokenizer is needed, as in vLLM's test
            self.info = Info()  # type: ignore[assignment]

        def _get_mm_fields_config(self, *args: Any) -> Any:
            raise NotImplementedError

        def _get_prompt_updates(self, *args: Any) -> Any:
            raise NotImplementedError

        def _find_mm_placeholders(self, new_token_ids: Any, mm_prompt_updates: Any) -> Any:
            calls.append(list(new_token_ids))
            return super()._find_mm_placeholders(new_token_ids, mm_prompt_updates)

    updates = resolve([PromptReplacement("image", "foo", "<image>")], image=1)
    new_ids, placeholders = Processor()._apply_prompt_updates(
        ids_of(tokenizer, "I like food"), updates
    )
    assert calls == [new_ids] and new_ids == ids_of(tokenizer, "I like <image>d")
    image_id = ids_of(tokenizer, "<image>")[0]
    [info] = placeholders["image"]
    assert (info.start_idx, info.tokens) == (new_ids.index(image_id), [image_id])


def test_text_fallback_content_lost_in_re_encoding_is_a_runtime_error(tokenizer: Any) -> None:
    # "foo" replaced by "foo" re-encodes as part of "food": the placeholder is gone.
    updates = resolve([PromptReplacement("image", "foo", "foo")], image=1)
    with pytest.raises(RuntimeError, match="image item 0 could not be found"):
        apply_prompt_updates(ids_of(tokenizer, "food"), updates, tokenizer)


def test_text_without_a_tokenizer_is_a_clear_error() -> None:
    updates = resolve([PromptReplacement("image", "<image>", [1])], image=1)
    with pytest.raises(ValueError, match="without a tokenizer"):
        apply_prompt_updates([1, 2], updates, None)


# --- locating applied placeholders -------------------------------------------------------------


def test_find_placeholders_applied_by_the_hf_processor() -> None:
    details = PromptUpdateDetails.select_token_id([100, 5, 5, 101], 5)
    updates = resolve(
        [
            PromptReplacement("image", [5], details),
            PromptReplacement("video", [6], lambda i: [6] * (i + 2)),
        ],
        image=2,
        video=1,
    )
    hf_ids = [1, 100, 5, 5, 101, 2, 6, 6, 3, 100, 5, 5, 101]
    placeholders = found_ranges(hf_ids, updates)
    mask = torch.tensor([False, True, True, False])
    assert placeholders == {
        "image": [PlaceholderRange(1, 4, mask), PlaceholderRange(9, 4, mask)],
        "video": [PlaceholderRange(6, 2)],
    }


def test_find_placeholders_stops_a_modality_at_its_first_missing_item() -> None:
    updates = resolve([PromptReplacement("image", [5], lambda i: [5] * (i + 1))], image=3)
    assert found_ranges([5, 0, 5, 5], updates) == {
        "image": [PlaceholderRange(0, 1), PlaceholderRange(2, 2)]
    }


def test_find_placeholders_prefers_the_modality_listed_first_at_one_position() -> None:
    updates = resolve(
        [PromptReplacement("image", [0], [5, 5]), PromptReplacement("video", [0], [5])],
        image=1,
        video=1,
    )
    assert found_ranges([5, 5, 5], updates) == {
        "image": [PlaceholderRange(0, 2)],
        "video": [PlaceholderRange(2, 1)],
    }


# --- resolved updates as values ----------------------------------------------------------------


def test_resolution_applies_per_item_callables_without_a_tokenizer() -> None:
    update = PromptReplacement("image", lambda i: f"<image_{i}>", lambda i: "<image>" * i)
    first, second = update.resolve(1), update.resolve(2)
    assert (first.target, first.content.full, first.item_idx, first.mode) == (
        "<image_1>",
        "<image>",
        1,
        UpdateMode.REPLACE,
    )
    assert second.content.full == "<image><image>"
    assert PromptInsertion("image", [1], [2]).resolve(0).mode is UpdateMode.INSERT


def test_resolved_updates_hash_compare_and_pickle() -> None:
    updates = [
        PromptReplacement("image", [9], PromptUpdateDetails.select_token_id([1, 5, 2], 5)),
        PromptInsertion(
            "video", PromptIndexTargets.prefix("<s>"), PromptUpdateDetails.select_text("x", "x")
        ),
        PromptInsertion("audio", PromptIndexTargets.end(), "<audio>"),
    ]
    for update in updates:
        resolved = update.resolve(3)
        assert resolved == update.resolve(3) and hash(resolved) == hash(update.resolve(3))
        restored = pickle.loads(pickle.dumps(resolved))
        assert restored == resolved and hash(restored) == hash(resolved)
    assert {updates[0].resolve(0), updates[0].resolve(0), updates[0].resolve(1)} == {
        updates[0].resolve(0),
        updates[0].resolve(1),
    }


def test_a_pickled_update_applies_like_the_original() -> None:
    updates = resolve(
        [PromptReplacement("image", [9], PromptUpdateDetails.select_token_id([1, 5], 5))], image=2
    )
    restored = pickle.loads(pickle.dumps(updates))
    assert apply_prompt_updates([9, 0, 9], restored, None) == apply_prompt_updates(
        [9, 0, 9], updates, None
    )


def test_token_ids_are_held_as_tuples_so_callers_cannot_mutate_a_cached_update() -> None:
    target, content = [9], [1, 2]
    resolved = PromptReplacement("image", target, content).resolve(0)
    target.append(8)
    content.append(3)
    assert (resolved.target, resolved.content.full) == ((9,), (1, 2))


@pytest.mark.parametrize("target", [[], ""])
def test_an_empty_target_matches_nowhere_as_in_vllm(
    tokenizer: PreTrainedTokenizerFast, target: list[int] | str
) -> None:
    resolved = PromptReplacement("image", target, [1]).resolve(0)
    updates = {"image": [[resolved]]}
    prompt = ids_of(tokenizer, "a b")
    assert find_mm_placeholders(prompt, updates, tokenizer=tokenizer) == {}
    # Not found on the token ids nor in the text: the item's placeholder is missing (a 400).
    with pytest.raises(VLLMValidationError, match="image"):
        apply_prompt_updates(prompt, updates, tokenizer)
    if isinstance(target, list):
        assert list(resolved.iter_token_matches(prompt)) == []


def test_with_target_and_with_content_make_modified_copies() -> None:
    resolved = PromptReplacement("image", [9], [1]).resolve(0)
    retargeted = resolved.with_target([8]).with_content([2, 2])
    assert (retargeted.target, retargeted.content.full) == ((8,), (2, 2))
    assert (resolved.target, resolved.content.full) == ((9,), (1,))


def test_iter_matches_on_tokens_text_and_positions(tokenizer: Any) -> None:
    by_ids = PromptReplacement("image", [1, 1], [0]).resolve(0)
    assert list(by_ids.iter_matches([1, 1, 1, 1, 1], None)) == [
        PromptTargetMatch(0, 2),
        PromptTargetMatch(2, 4),
    ]
    assert list(by_ids.iter_matches([1, 1, 1, 1, 1], None, start_idx=1)) == [
        PromptTargetMatch(1, 3),
        PromptTargetMatch(3, 5),
    ]
    by_text = PromptReplacement("image", ids_of(tokenizer, "<image>"), [0]).resolve(0)
    assert list(by_text.iter_matches("a<image>b", tokenizer)) == [PromptTargetMatch(1, 8)]
    at_end = PromptInsertion("image", PromptIndexTargets.end(), [0]).resolve(0)
    assert list(at_end.iter_matches([1, 2], None)) == [PromptTargetMatch(2, 2)]
    # vLLM's end() resolves to the prompt's end whatever the search start.
    assert list(at_end.iter_matches([1, 2], None, start_idx=3)) == [PromptTargetMatch(2, 2)]
