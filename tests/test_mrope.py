"""Qwen2-VL M-RoPE position ids from a ``TokenLayout``, against transformers' own
``get_rope_index`` (config built offline, no weights), and the paths from a processor's output,
from vLLM's features and from a rendered request of the built-in model."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# huggingface_hub reads this when first imported; set before anything imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from PIL import Image
from transformers import AutoConfig, Qwen2_5_VLConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

from mediaref.inputs import (
    MultiModalBatchedField,
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    PlaceholderRange,
)
from mediaref.models.builtin import builtin_model_path
from mediaref.models.qwen2_vl_mrope import Qwen2VLMRope, qwen2_vl_mrope_positions
from mediaref.processing import MediaSpan, TextSpan, TokenLayout
from mediaref.processing.context import ModelConfig
from mediaref.renderers.base import BaseRenderer

QWEN2_VL = str(builtin_model_path("qwen2_vl"))
IMAGE_TEXT = "<|vision_start|><|image_pad|><|vision_end|>"
VIDEO_TEXT = "<|vision_start|><|video_pad|><|vision_end|>"
TYPE_IDS = {"image": 1, "video": 2}  # HF's mm_token_type_ids: text 0, image 1, video 2

Item = tuple[str, int, int, int]  # modality, grid t, h, w (patches, before the 2x2 merge)


def _weightless(model_cls: type[Any], config: Any) -> Any:
    """The model object get_rope_index needs: its config, no submodules, no weights."""
    model = model_cls.__new__(model_cls)
    torch.nn.Module.__init__(model)
    model.config = config
    return model


@pytest.fixture(scope="module")
def qwen2_vl_config() -> Any:
    return AutoConfig.from_pretrained(QWEN2_VL)


@pytest.fixture(scope="module")
def rope(qwen2_vl_config: Any) -> Qwen2VLMRope:
    return Qwen2VLMRope.from_config(qwen2_vl_config)


@pytest.fixture(scope="module")
def hf_qwen2_vl(qwen2_vl_config: Any) -> Any:
    return _weightless(Qwen2VLModel, qwen2_vl_config)


def _prompt(
    rope: Qwen2VLMRope, items: list[Item], texts: list[int]
) -> tuple[TokenLayout, list[list[int]], list[list[int]]]:
    """``texts[0]`` tokens, item 0, ``texts[1]`` tokens, item 1... with the grids in order."""
    spans: list[TextSpan | MediaSpan] = [TextSpan(tuple(range(10, 10 + texts[0])))]
    grids: dict[str, list[list[int]]] = {"image": [], "video": []}
    for (modality, t, h, w), text in zip(items, texts[1:], strict=True):
        token = rope.image_token_id if modality == "image" else rope.video_token_id
        spans.append(MediaSpan.repeat(modality, token, t * h * w // 4))
        spans.append(TextSpan(tuple(range(20, 20 + text))))
        grids[modality].append([t, h, w])
    return TokenLayout(spans), grids["image"], grids["video"]


def _get_rope_index(model: Any, layout: TokenLayout, **kwargs: Any) -> tuple[torch.Tensor, int]:
    positions, deltas = model.get_rope_index(
        torch.tensor([layout.token_ids()]),
        torch.tensor([layout.mm_token_type_ids(TYPE_IDS)]),
        **{key: torch.tensor(value) if value else None for key, value in kwargs.items()},
    )
    return positions[:, 0], int(deltas[0, 0])


_items = st.lists(
    st.one_of(
        st.tuples(st.just("image"), st.just(1), st.integers(1, 9), st.integers(1, 9)),
        st.tuples(st.just("video"), st.integers(1, 12), st.integers(1, 6), st.integers(1, 6)),
    ).map(lambda item: (item[0], item[1], 2 * item[2], 2 * item[3])),
    min_size=1,
    max_size=5,
)


@st.composite
def _prompts(draw: st.DrawFn) -> tuple[list[Item], list[int]]:
    items = draw(_items)
    # transformers groups tokens by type, so two items need text between them (Qwen2-VL's
    # <|vision_end|><|vision_start|> always is); the first and last text may be empty.
    middle = draw(st.lists(st.integers(1, 5), min_size=len(items) - 1, max_size=len(items) - 1))
    return items, [draw(st.integers(0, 5)), *middle, draw(st.integers(0, 5))]


# -- parity with transformers ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(_prompts())
def test_positions_equal_transformers_get_rope_index(
    rope: Qwen2VLMRope, hf_qwen2_vl: Any, prompt: tuple[list[Item], list[int]]
) -> None:
    layout, images, videos = _prompt(rope, *prompt)
    expected, expected_delta = _get_rope_index(
        hf_qwen2_vl, layout, image_grid_thw=images, video_grid_thw=videos
    )
    # Qwen2-VL has no time scale: transformers ignores second_per_grid_ts, and so do we.
    seconds = [0.5] * len(videos) or None
    positions, delta = rope.positions(
        layout,
        image_grid_thw=images,
        video_grid_thw=videos,
        second_per_grid_ts=seconds,
        convention="transformers",
    )
    assert positions.dtype == torch.int64 and positions.shape == (3, len(layout))
    assert torch.equal(positions, expected)
    assert delta == expected_delta


@settings(max_examples=200, deadline=None)
@given(_prompts())
def test_vllm_convention_is_transformers_wherever_no_video_outlasts_its_width(
    rope: Qwen2VLMRope, hf_qwen2_vl: Any, prompt: tuple[list[Item], list[int]]
) -> None:
    items, _ = prompt
    assume(all(t <= max(h, w) // 2 for _, t, h, w in items))
    layout, images, videos = _prompt(rope, *prompt)
    expected = _get_rope_index(hf_qwen2_vl, layout, image_grid_thw=images, video_grid_thw=videos)
    positions, delta = rope.positions(layout, image_grid_thw=images, video_grid_thw=videos)
    assert torch.equal(positions, expected[0]) and delta == expected[1]


def test_the_conventions_part_after_a_video_longer_than_it_is_wide(
    rope: Qwen2VLMRope, hf_qwen2_vl: Any
) -> None:
    # 3 text tokens, a video of 8 temporal steps of one merged patch each, 2 text tokens.
    layout, _, videos = _prompt(rope, [("video", 8, 2, 2)], [3, 2])
    video_rows = [3, 4, 5, 6, 7, 8, 9, 10]
    expected_hf = _get_rope_index(hf_qwen2_vl, layout, video_grid_thw=videos)
    tail = {"transformers": [4, 5], "vllm": [11, 12]}
    deltas = {"transformers": -2, "vllm": 0}
    for convention in ("transformers", "vllm"):
        positions, delta = rope.positions(layout, video_grid_thw=videos, convention=convention)
        assert positions[0].tolist() == [0, 1, 2, *video_rows, *tail[convention]]
        assert positions[1].tolist() == [0, 1, 2, *[3] * 8, *tail[convention]]
        assert delta == deltas[convention]
    assert torch.equal(
        expected_hf[0], rope.positions(layout, video_grid_thw=videos, convention="transformers")[0]
    )


# -- the video time scale (Qwen2.5-VL's config has tokens_per_second) ---------------------------


@settings(max_examples=150, deadline=None)
@given(
    _prompts(),
    st.lists(
        st.one_of(st.sampled_from([0.25, 0.5, 1.0, 1.5, 2 / 3, 1 / 3]), st.floats(0.01, 4.0)),
        min_size=5,
        max_size=5,
    ),
)
def test_time_scale_equals_transformers_qwen2_5_vl(
    prompt: tuple[list[Item], list[int]], seconds: list[float]
) -> None:
    config = Qwen2_5_VLConfig()
    rope = Qwen2VLMRope.from_config(config)
    assert rope.tokens_per_second == config.vision_config.tokens_per_second
    layout, images, videos = _prompt(rope, *prompt)
    per_video = torch.tensor(seconds[: len(videos)], dtype=torch.float32)
    expected = _weightless(Qwen2_5_VLModel, config).get_rope_index(
        torch.tensor([layout.token_ids()]),
        torch.tensor([layout.mm_token_type_ids(TYPE_IDS)]),
        image_grid_thw=torch.tensor(images) if images else None,
        video_grid_thw=torch.tensor(videos) if videos else None,
        second_per_grid_ts=per_video if videos else None,
    )
    positions, delta = rope.positions(
        layout,
        image_grid_thw=images,
        video_grid_thw=videos,
        second_per_grid_ts=per_video,
        convention="transformers",
    )
    assert torch.equal(positions, expected[0][:, 0]) and delta == int(expected[1][0, 0])


def test_vllm_convention_scales_time_and_resumes_after_the_largest_position() -> None:
    layout = TokenLayout([TextSpan((1, 2)), MediaSpan.repeat("video", 9, 12), TextSpan((3,))])
    positions, delta = qwen2_vl_mrope_positions(
        layout, video_grid_thw=[[3, 4, 4]], tokens_per_second=2, second_per_grid_ts=[1.5]
    )
    temporal = [2 + 3 * step for step in range(3) for _ in range(4)]  # steps 1.5 s x 2 tokens/s
    assert positions[0].tolist() == [0, 1, *temporal, 9]
    assert positions[1].tolist() == [0, 1, *[2, 2, 3, 3] * 3, 9]
    assert positions[2].tolist() == [0, 1, *[2, 3, 2, 3] * 3, 9]
    assert delta == 10 - 15


# -- what is refused ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spans", "grids", "match"),
    [
        ([MediaSpan.repeat("image", 1, 4)], {}, "More image spans"),
        ([MediaSpan.repeat("image", 1, 4)], {"image_grid_thw": [[1, 4, 4], [1, 2, 2]]}, "2 image"),
        ([MediaSpan.repeat("image", 1, 3)], {"image_grid_thw": [[1, 4, 4]]}, "makes 4"),
        (
            [MediaSpan.sequence("image", [1, 5, 1, 1], embed_token_id=1)],
            {"image_grid_thw": [[1, 4, 4]]},
            "interleaves markers",
        ),
        ([MediaSpan.repeat("audio", 1, 4)], {}, "not 'audio'"),
        ([MediaSpan.repeat("video", 1, 4)], {"video_grid_thw": [[1, 4]]}, "is \\(t, h, w\\)"),
    ],
)
def test_layouts_and_grids_that_disagree_are_refused(
    spans: list[MediaSpan], grids: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        qwen2_vl_mrope_positions(TokenLayout(spans), **grids)


def test_a_missing_time_step_and_an_unknown_convention_are_refused() -> None:
    layout = TokenLayout(
        [MediaSpan.repeat("video", 1, 1), TextSpan((0,)), MediaSpan.repeat("video", 1, 1)]
    )
    with pytest.raises(ValueError, match="No second_per_grid_ts for video 1"):
        qwen2_vl_mrope_positions(
            layout, video_grid_thw=[[1, 2, 2]] * 2, second_per_grid_ts=[1.0], tokens_per_second=2
        )
    with pytest.raises(ValueError, match="convention must be"):
        qwen2_vl_mrope_positions(layout, convention="sglang")  # type: ignore[arg-type]


def test_an_empty_or_text_only_prompt_has_plain_positions() -> None:
    positions, delta = qwen2_vl_mrope_positions(TokenLayout([]))
    assert positions.shape == (3, 0) and delta == 0
    positions, delta = qwen2_vl_mrope_positions(TokenLayout([TextSpan((5, 6, 7))]))
    assert positions.tolist() == [[0, 1, 2]] * 3 and delta == 0


# -- vLLM's model method --------------------------------------------------------------------------


def _feature(modality: str, offset: int, grid: list[int], **extra: torch.Tensor) -> Any:
    field = MultiModalBatchedField()
    data = {f"{modality}_grid_thw": MultiModalFieldElem(data=torch.tensor(grid), field=field)}
    data.update({key: MultiModalFieldElem(data=value, field=field) for key, value in extra.items()})
    length = grid[0] * grid[1] * grid[2] // 4
    return MultiModalFeatureSpec(
        data=MultiModalKwargsItem(data),
        modality=modality,
        identifier=f"{modality}{offset}",
        mm_position=PlaceholderRange(offset=offset, length=length),
    )


def test_get_mrope_input_positions_takes_vllm_s_features_in_any_order(rope: Qwen2VLMRope) -> None:
    # text 2 | video 2x(2x2 merged) = 8 | text 1 | image 1x(1x2) = 2 | text 1
    tokens = [7, 7, *[rope.video_token_id] * 8, 7, *[rope.image_token_id] * 2, 7]
    features = [_feature("image", 11, [1, 2, 4]), _feature("video", 2, [2, 4, 4])]
    positions, delta = rope.get_mrope_input_positions(tokens, features)
    # Checked against vLLM 0.33.0's Qwen2VLForConditionalGeneration method.
    assert positions.tolist() == [
        [0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 5, 5, 7],
        [0, 1, 2, 2, 3, 3, 2, 2, 3, 3, 4, 5, 5, 7],
        [0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 6, 7],
    ]
    assert delta == 8 - 14
    scaled = [_feature("video", 2, [2, 4, 4], second_per_grid_ts=torch.tensor([2.0]))]
    scaled_positions, _ = rope.get_mrope_input_positions(tokens[:11], scaled)
    assert scaled_positions[0, 6:10].tolist() == [4] * 4  # the second step sits 2 s x 1 token/s on


def test_get_mrope_input_positions_refuses_features_without_data_or_of_other_modalities(
    rope: Qwen2VLMRope,
) -> None:
    feature = _feature("image", 0, [1, 2, 2])
    with pytest.raises(ValueError, match="holds no data"):
        rope.get_mrope_input_positions(
            [1], [MultiModalFeatureSpec(None, "image", "x", feature.mm_position)]
        )
    with pytest.raises(ValueError, match="Unsupported modality: audio"):
        rope.get_mrope_input_positions(
            [1], [MultiModalFeatureSpec(None, "audio", "x", feature.mm_position)]
        )


# -- from a processor's output and from a rendered request (the built-in model) -------------------


def _media() -> dict[str, list[Any]]:
    frames = np.random.default_rng(0).integers(0, 255, (8, 56, 84, 3), dtype=np.uint8)
    small = Image.new("RGB", (100, 60), (10, 200, 30))
    return {"image": [small, Image.new("RGB", (57, 300), (1, 2, 3))], "video": [frames]}


PROMPT = f"Look {VIDEO_TEXT} then {IMAGE_TEXT} and {IMAGE_TEXT} now"


def test_hf_processor_output_gives_transformers_positions(
    rope: Qwen2VLMRope, hf_qwen2_vl: Any, hf_vl: Any
) -> None:
    media = _media()
    out = hf_vl(text=[PROMPT], images=media["image"], videos=media["video"], return_tensors="pt")
    result = rope.from_hf_output(out, convention="transformers")
    assert result.layout.token_ids() == out["input_ids"][0].tolist()
    assert result.layout.mm_token_type_ids(TYPE_IDS) == out["mm_token_type_ids"][0].tolist()
    expected, deltas = hf_qwen2_vl.get_rope_index(
        out["input_ids"],
        out["mm_token_type_ids"],
        image_grid_thw=out["image_grid_thw"],
        video_grid_thw=out["video_grid_thw"],
    )
    assert torch.equal(result.positions, expected[:, 0])
    assert result.mrope_position_delta == int(deltas[0, 0])
    batch = hf_vl(text=[PROMPT, PROMPT], images=media["image"] * 2, videos=media["video"] * 2)
    with pytest.raises(ValueError, match="not a batch"):
        rope.from_hf_output(batch)


def test_a_processed_request_gives_its_layout_and_the_hf_positions(
    rope: Qwen2VLMRope, hf_vl: Any, qwen2_vl_processor: Any
) -> None:
    media = _media()
    inputs = qwen2_vl_processor.apply(qwen2_vl_processor.build_inputs(PROMPT, media))
    result = rope.for_inputs(inputs)
    assert result.layout.token_ids() == inputs["prompt_token_ids"]
    assert result.layout.placeholders() == inputs["mm_placeholders"]
    hf_out = hf_vl(text=[PROMPT], images=media["image"], videos=media["video"], return_tensors="pt")
    reference = rope.from_hf_output(hf_out)
    assert result.layout == reference.layout
    assert torch.equal(result.positions, reference.positions)
    assert result.mrope_position_delta == reference.mrope_position_delta


def test_a_request_whose_item_data_stayed_in_the_cache_is_refused(
    rope: Qwen2VLMRope, qwen2_vl_processor: Any
) -> None:
    inputs = dict(qwen2_vl_processor.apply(qwen2_vl_processor.build_inputs(PROMPT, _media())))
    kwargs = dict(inputs["mm_kwargs"])
    kwargs["image"] = [kwargs["image"][0], None]
    with pytest.raises(ValueError, match="image item 1 holds no data"):
        rope.for_inputs({**inputs, "mm_kwargs": kwargs})
    kwargs["image"] = kwargs["image"][:1]
    with pytest.raises(ValueError, match="2 image placeholders but 1 items"):
        rope.for_inputs({**inputs, "mm_kwargs": kwargs})


@dataclass
class _VllmConfig:
    model_config: ModelConfig
    observability_config: Any = None


def test_a_rendered_request_of_the_built_in_model_end_to_end(hf_qwen2_vl: Any) -> None:
    renderer = BaseRenderer(_VllmConfig(ModelConfig(model=QWEN2_VL)))
    try:
        [engine_input] = renderer.render_cmpl([{"prompt": PROMPT, "multi_modal_data": _media()}])
        rope = Qwen2VLMRope.from_config(renderer.model_config.hf_config)
        result = rope.for_inputs(engine_input, convention="transformers")
    finally:
        renderer.shutdown()
    layout = result.layout
    assert layout.token_ids() == engine_input["prompt_token_ids"]
    assert [span.modality for _, span in layout.media_spans()] == ["video", "image", "image"]
    grids = {
        modality: torch.stack([item[f"{modality}_grid_thw"].data for item in items])
        for modality, items in engine_input["mm_kwargs"].items()
    }
    expected = _get_rope_index(
        hf_qwen2_vl,
        layout,
        image_grid_thw=grids["image"].tolist(),
        video_grid_thw=grids["video"].tolist(),
    )
    assert torch.equal(result.positions, expected[0])
    assert result.mrope_position_delta == expected[1]


def test_items_given_out_of_prompt_order_take_their_own_grids(rope: Qwen2VLMRope) -> None:
    # The second image's placeholder comes first in the prompt: grids follow the offsets.
    ids = [7, *[rope.image_token_id] * 2, 7, *[rope.image_token_id] * 4, 7]
    field = MultiModalBatchedField()
    items = [
        MultiModalKwargsItem({"image_grid_thw": MultiModalFieldElem(torch.tensor(g), field)})
        for g in ([1, 4, 4], [1, 2, 4])
    ]
    inputs = {
        "prompt_token_ids": ids,
        "mm_placeholders": {
            "image": [PlaceholderRange(offset=4, length=4), PlaceholderRange(offset=1, length=2)]
        },
        "mm_kwargs": {"image": items},
    }
    result = rope.for_inputs(inputs)
    assert result.positions[2, 1:3].tolist() == [1, 2]  # the 1x2 grid, first in the prompt
    assert result.positions[1, 4:8].tolist() == [4, 4, 5, 5]  # the 2x2 grid after it
