"""encode_text: the direct Rust route gives exactly tokenizer.encode's ids, and is taken only then."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from mediaref.models.builtin import builtin_model_path
from mediaref.processing._fast_encode import encode_text

PROMPTS = [
    "",
    " ",
    "Describe this image.",
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is in it?<|im_end|>\n",
    "<|image_pad|><|image_pad|><|video_pad|>",
    "naïve café — 日本語のテキスト 🙂\r\n\ttabs  and   spaces",
    "<|im_start|" + "|>",  # a special token's spelling broken apart
    "x" * 3000,
]


def load_tokenizer(**kwargs: Any) -> Any:
    return AutoTokenizer.from_pretrained(str(builtin_model_path("qwen2_vl")), **kwargs)


class WrapperForbidden(Exception):
    pass


def forbid_wrapper(monkeypatch: pytest.MonkeyPatch, tokenizer: Any) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise WrapperForbidden

    monkeypatch.setattr(tokenizer, "encode", refuse)


@pytest.mark.parametrize("add_special_tokens", [None, True, False])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_direct_route_gives_the_wrappers_ids(
    qwen2_vl_tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
    prompt: str,
    add_special_tokens: bool | None,
) -> None:
    kwargs = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
    expected = qwen2_vl_tokenizer.encode(prompt, **kwargs)
    forbid_wrapper(monkeypatch, qwen2_vl_tokenizer)  # the fast route must not fall back to encode()
    assert encode_text(qwen2_vl_tokenizer, prompt, **kwargs) == expected


_PIECES = st.sampled_from(["<|image_pad|>", "<|im_start|>", "<|im_end|>", "\n", " ", "ab", "é"])


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.one_of(_PIECES, st.text(max_size=12)), max_size=12))
def test_direct_route_matches_on_arbitrary_text(qwen2_vl_tokenizer: Any, pieces: list[str]) -> None:
    prompt = "".join(pieces)  # the session-scoped tokenizer is shared by every example
    assert encode_text(qwen2_vl_tokenizer, prompt) == qwen2_vl_tokenizer.encode(prompt)
    assert encode_text(
        qwen2_vl_tokenizer, prompt, add_special_tokens=False
    ) == qwen2_vl_tokenizer.encode(prompt, add_special_tokens=False)


def test_other_arguments_go_through_the_wrapper(qwen2_vl_tokenizer: Any) -> None:
    prompt = "one two three four five six seven"
    expected = qwen2_vl_tokenizer.encode(prompt, truncation=True, max_length=3)
    assert len(expected) == 3
    assert encode_text(qwen2_vl_tokenizer, prompt, truncation=True, max_length=3) == expected


def test_backend_truncation_left_on_goes_through_the_wrapper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokenizer = load_tokenizer()
    prompt = "one two three four five six seven"
    untruncated = tokenizer.encode(prompt)
    tokenizer._tokenizer.enable_truncation(2)  # left behind by some earlier truncating call
    calls = []
    original = tokenizer.encode
    monkeypatch.setattr(tokenizer, "encode", lambda *a, **k: calls.append(1) or original(*a, **k))
    # The wrapper switches the backend's truncation off for a plain encode; so must we.
    assert encode_text(tokenizer, prompt) == untruncated
    assert calls == [1]


def test_split_special_tokens_is_honoured() -> None:
    tokenizer = load_tokenizer(split_special_tokens=True)
    prompt = "<|image_pad|>"
    expected = tokenizer.encode(prompt)
    assert len(expected) > 1  # split into ordinary tokens
    assert encode_text(tokenizer, prompt) == expected


def test_a_subclass_overriding_encode_keeps_its_behaviour() -> None:
    base = type(load_tokenizer())

    class Shouting(base):  # type: ignore[misc, valid-type]
        def encode(self, text: Any, *args: Any, **kwargs: Any) -> list[int]:
            return super().encode(text.upper(), *args, **kwargs)

    tokenizer = Shouting.from_pretrained(str(builtin_model_path("qwen2_vl")))
    assert (
        encode_text(tokenizer, "abc") == tokenizer.encode("abc") != load_tokenizer().encode("abc")
    )


def test_non_fast_tokenizers_use_encode() -> None:
    class Listing:
        def encode(self, text: str, add_special_tokens: bool = True) -> tuple[int, ...]:
            return tuple(ord(c) for c in text)

    assert encode_text(Listing(), "ab", add_special_tokens=False) == [97, 98]


def test_too_long_warning_is_kept(caplog: pytest.LogCaptureFixture) -> None:
    tokenizer = load_tokenizer()
    tokenizer.model_max_length = 4
    with caplog.at_level(logging.WARNING):
        ids = encode_text(tokenizer, "one two three four five six")
    assert ids == tokenizer.encode("one two three four five six")
    assert any("longer than the specified maximum" in r.getMessage() for r in caplog.records)
