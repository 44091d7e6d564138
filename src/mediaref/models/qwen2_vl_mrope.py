"""Qwen2-VL's M-RoPE position ids (3 x seq: temporal, height, width) from a :class:`TokenLayout`.

Text tokens get one position, repeated on the three rows. An item's ``t x h x w`` tokens (``h``,
``w``: the grid over ``spatial_merge_size``) get ``start + (t_idx * interval, h_idx, w_idx)``,
``interval`` being ``tokens_per_second * second_per_grid_ts`` for a video (1 for images, and for
Qwen2-VL, whose config has no ``tokens_per_second`` and whose processor emits no
``second_per_grid_ts``). The ``mrope_position_delta`` is ``max position + 1 - seq len``: decode
step ``i`` then sits at ``i + delta`` on all three rows.

Where text resumes after an item, two conventions disagree (``convention=``):

- ``"vllm"`` (the default): one past the item's largest position, as vLLM 0.33's
  ``get_mrope_input_positions``, Qwen's original code and transformers v4 do;
- ``"transformers"``: ``start + max(h, w)``, as transformers v5's ``Qwen2VLModel.get_rope_index``
  does; its temporal steps are also computed in float32 (its ``second_per_grid_ts`` tensor), vLLM's
  in float64.

They agree on every image and on every video whose temporal extent stays within its spatial one
(``(t - 1) * interval < max(h, w)``); they differ on long, small videos, where transformers v5's
tail text reuses positions the video holds while its delta still counts from the maximum.

:class:`Qwen2VLMRope` reads the numbers from a Qwen2-VL config and offers vLLM's model method
(``get_mrope_input_positions(input_tokens, mm_features)``) and the paths from a processor's
output (:meth:`Qwen2VLMRope.from_hf_output`) and from a rendered request
(:meth:`Qwen2VLMRope.for_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeAlias

import torch

from mediaref.inputs import MultiModalFeatureSpec, PlaceholderRange
from mediaref.processing.token_layout import MediaSpan, TextSpan, TokenLayout

MRopeConvention: TypeAlias = Literal["vllm", "transformers"]
GridInput: TypeAlias = torch.Tensor | Sequence[Sequence[int]]
_MODALITIES = ("image", "video")


class MRopePositions(NamedTuple):
    """A prompt's layout, its ``(3, len)`` ``int64`` positions and its ``mrope_position_delta``."""

    layout: TokenLayout
    positions: torch.Tensor
    mrope_position_delta: int


def qwen2_vl_mrope_positions(
    layout: TokenLayout,
    *,
    image_grid_thw: GridInput | None = None,
    video_grid_thw: GridInput | None = None,
    spatial_merge_size: int = 2,
    tokens_per_second: float | None = None,
    second_per_grid_ts: torch.Tensor | Sequence[float] | None = None,
    convention: MRopeConvention = "vllm",
) -> tuple[torch.Tensor, int]:
    """The ``(3, len(layout))`` position ids and the delta for a Qwen2-VL-family prompt.

    The ``k``-th image span in prompt order takes ``image_grid_thw[k]`` (videos alike, and
    ``second_per_grid_ts[k]``). ``ValueError`` when the spans and grids disagree in count or size,
    or an item's span interleaves markers (the family never does).
    """
    if convention not in ("vllm", "transformers"):
        raise ValueError(f"convention must be 'vllm' or 'transformers', not {convention!r}")
    grids = {"image": _grid_rows(image_grid_thw), "video": _grid_rows(video_grid_thw)}
    seconds = None if second_per_grid_ts is None else _seconds(second_per_grid_ts)
    used = {modality: 0 for modality in _MODALITIES}
    positions = torch.empty((3, len(layout)), dtype=torch.int64)
    start = 0
    for offset, span in layout.iter_spans():
        end = offset + len(span)
        if isinstance(span, TextSpan):
            positions[:, offset:end] = torch.arange(start, start + len(span))
            start += len(span)
            continue
        index = used.get(span.modality)
        if index is None:
            raise ValueError(f"Qwen2-VL M-RoPE knows images and videos, not {span.modality!r}")
        if index >= len(grids[span.modality]):
            raise ValueError(f"More {span.modality} spans than {span.modality}_grid_thw rows")
        used[span.modality] += 1
        t, h, w = grids[span.modality][index]
        llm_h, llm_w = h // spatial_merge_size, w // spatial_merge_size
        _check_span(span, index, t * llm_h * llm_w)
        scale = _time_scale(span.modality, index, tokens_per_second, seconds, convention)
        block = _grid_positions(t, llm_h, llm_w, scale) + start
        positions[:, offset:end] = block
        start = start + max(llm_h, llm_w) if convention == "transformers" else int(block.max()) + 1
    for modality in _MODALITIES:
        if used[modality] != len(grids[modality]):
            raise ValueError(
                f"{len(grids[modality])} {modality}_grid_thw rows but {used[modality]} "
                f"{modality} spans in the prompt"
            )
    delta = int(positions.max()) + 1 - len(layout) if len(layout) else 0
    return positions, delta


@dataclass(frozen=True)
class Qwen2VLMRope:
    """Qwen2-VL's M-RoPE numbers, read once from its config (no weights involved)."""

    image_token_id: int
    video_token_id: int
    spatial_merge_size: int = 2
    tokens_per_second: float | None = None

    @classmethod
    def from_config(cls, hf_config: Any) -> Qwen2VLMRope:
        """From a ``Qwen2VLConfig`` (or any config with the same fields)."""
        vision = hf_config.vision_config
        return cls(
            image_token_id=int(hf_config.image_token_id),
            video_token_id=int(hf_config.video_token_id),
            spatial_merge_size=int(vision.spatial_merge_size),
            tokens_per_second=getattr(vision, "tokens_per_second", None),
        )

    def layout(
        self,
        prompt_token_ids: Sequence[int],
        *,
        image_grid_thw: GridInput | None = None,
        video_grid_thw: GridInput | None = None,
    ) -> TokenLayout:
        """An expanded prompt's layout, items cut by their grids' token counts."""
        merge_length = self.spatial_merge_size**2
        return TokenLayout.from_token_ids(
            prompt_token_ids,
            {"image": self.image_token_id, "video": self.video_token_id},
            item_lengths={
                "image": [t * h * w // merge_length for t, h, w in _grid_rows(image_grid_thw)],
                "video": [t * h * w // merge_length for t, h, w in _grid_rows(video_grid_thw)],
            },
        )

    def positions(
        self,
        layout: TokenLayout,
        *,
        image_grid_thw: GridInput | None = None,
        video_grid_thw: GridInput | None = None,
        second_per_grid_ts: torch.Tensor | Sequence[float] | None = None,
        convention: MRopeConvention = "vllm",
    ) -> tuple[torch.Tensor, int]:
        """:func:`qwen2_vl_mrope_positions` with this config's numbers."""
        return qwen2_vl_mrope_positions(
            layout,
            image_grid_thw=image_grid_thw,
            video_grid_thw=video_grid_thw,
            spatial_merge_size=self.spatial_merge_size,
            tokens_per_second=self.tokens_per_second,
            second_per_grid_ts=second_per_grid_ts,
            convention=convention,
        )

    def from_hf_output(
        self, hf_output: Mapping[str, Any], *, convention: MRopeConvention = "vllm"
    ) -> MRopePositions:
        """From an HF processor's output: ``input_ids`` (one prompt) and the grids."""
        input_ids = torch.as_tensor(hf_output["input_ids"])
        if input_ids.dim() == 2 and input_ids.shape[0] == 1:
            input_ids = input_ids[0]
        if input_ids.dim() != 1:
            raise ValueError("from_hf_output takes one prompt's output, not a batch")
        grids = {
            "image_grid_thw": hf_output.get("image_grid_thw"),
            "video_grid_thw": hf_output.get("video_grid_thw"),
        }
        layout = self.layout(input_ids.tolist(), **grids)
        positions, delta = self.positions(
            layout,
            **grids,
            second_per_grid_ts=hf_output.get("second_per_grid_ts"),
            convention=convention,
        )
        return MRopePositions(layout, positions, delta)

    def for_inputs(
        self, inputs: Mapping[str, Any], *, convention: MRopeConvention = "vllm"
    ) -> MRopePositions:
        """From a rendered request (mediaref's ``MultiModalInputs``: ``prompt_token_ids``,
        ``mm_placeholders`` and ``mm_kwargs``); every item's data must be present."""
        placeholders: Mapping[str, Sequence[PlaceholderRange]] = inputs.get("mm_placeholders", {})
        kwargs = inputs.get("mm_kwargs") or {}
        layout = TokenLayout.from_placeholders(inputs["prompt_token_ids"], placeholders)
        grids: dict[str, list[list[int]]] = {}
        seconds: list[float] = []
        for modality in _MODALITIES:
            ranges = placeholders.get(modality, [])
            items = list(kwargs.get(modality, [])) if modality in kwargs else []
            if len(items) != len(ranges):
                raise ValueError(f"{len(ranges)} {modality} placeholders but {len(items)} items")
            for index, (_, item) in enumerate(
                sorted(zip(ranges, items, strict=True), key=_by_offset)
            ):
                if item is None:
                    raise ValueError(
                        f"{modality} item {index} holds no data (a processor-cache hit the "
                        "engine core fills in): its grid is unknown here"
                    )
                grids.setdefault(modality, []).append(_item_grid(item, f"{modality}_grid_thw"))
                if modality == "video":
                    seconds.append(_item_seconds(item))
        positions, delta = self.positions(
            layout,
            image_grid_thw=grids.get("image"),
            video_grid_thw=grids.get("video"),
            second_per_grid_ts=seconds or None,
            convention=convention,
        )
        return MRopePositions(layout, positions, delta)

    def get_mrope_input_positions(
        self, input_tokens: list[int], mm_features: list[MultiModalFeatureSpec]
    ) -> tuple[torch.Tensor, int]:
        """vLLM 0.33's ``Qwen2VLForConditionalGeneration.get_mrope_input_positions``: the
        positions and delta from the prompt and its features (vLLM's convention)."""
        placeholders: dict[str, list[PlaceholderRange]] = {}
        grids: dict[str, list[list[int]]] = {}
        seconds: list[float] = []
        for feature in sorted(mm_features, key=lambda f: f.mm_position.offset):
            if feature.modality not in _MODALITIES:
                raise ValueError(f"Unsupported modality: {feature.modality}")
            if feature.data is None:
                raise ValueError(f"A {feature.modality} feature holds no data")
            grid = _item_grid(feature.data, f"{feature.modality}_grid_thw")
            merged = grid[0] * grid[1] * grid[2] // self.spatial_merge_size**2
            placeholders.setdefault(feature.modality, []).append(
                PlaceholderRange(offset=feature.mm_position.offset, length=merged)
            )
            grids.setdefault(feature.modality, []).append(grid)
            if feature.modality == "video":
                seconds.append(_item_seconds(feature.data))
        layout = TokenLayout.from_placeholders(input_tokens, placeholders)
        return self.positions(
            layout,
            image_grid_thw=grids.get("image"),
            video_grid_thw=grids.get("video"),
            second_per_grid_ts=seconds or None,
        )


def _grid_rows(grid_thw: GridInput | None) -> list[list[int]]:
    if grid_thw is None:
        return []
    if isinstance(grid_thw, torch.Tensor):
        return [[int(v) for v in row] for row in grid_thw.reshape(-1, 3).tolist()]
    rows = [[int(v) for v in row] for row in grid_thw]
    if any(len(row) != 3 for row in rows):
        raise ValueError(f"A grid row is (t, h, w), got {rows}")
    return rows


def _seconds(values: torch.Tensor | Sequence[float]) -> torch.Tensor:
    # Kept as float32: what HF processors emit and transformers multiplies with.
    return torch.as_tensor(values, dtype=torch.float32).reshape(-1)


def _check_span(span: MediaSpan, index: int, expected: int) -> None:
    if span.embed_mask is not None:
        raise ValueError(f"{span.modality} item {index} interleaves markers; Qwen2-VL's never do")
    if span.length != expected:
        raise ValueError(
            f"{span.modality} item {index} spans {span.length} tokens but its grid makes {expected}"
        )


def _time_scale(
    modality: str,
    index: int,
    tokens_per_second: float | None,
    seconds: torch.Tensor | None,
    convention: MRopeConvention,
) -> torch.Tensor | float:
    """How far apart the item's temporal grid steps are (1 for an image)."""
    if modality != "video":
        return 1.0
    if convention == "transformers" and tokens_per_second is None:
        return 1.0  # transformers' Qwen2-VL has no time scale; its Qwen2.5-VL reads the config's
    per_second = 1.0 if tokens_per_second is None else tokens_per_second
    if seconds is not None and index >= len(seconds):
        raise ValueError(f"No second_per_grid_ts for video {index}")
    second = seconds[index] if seconds is not None else torch.tensor(1.0)
    if convention == "transformers":
        return per_second * second  # a float32 tensor, as transformers computes it
    return float(second) * per_second  # float64, as vLLM computes it


def _grid_positions(t: int, h: int, w: int, scale: torch.Tensor | float) -> torch.Tensor:
    """``(3, t*h*w)`` positions of one item from 0, in the row-major order of its tokens."""
    temporal = torch.arange(t, dtype=torch.int64)
    if isinstance(scale, torch.Tensor):
        temporal = (temporal * scale).long()
    elif scale != 1.0:
        temporal = (temporal.double() * scale).long()
    grid = torch.meshgrid(
        temporal,
        torch.arange(h, dtype=torch.int64),
        torch.arange(w, dtype=torch.int64),
        indexing="ij",
    )
    return torch.stack(grid).reshape(3, -1)


def _by_offset(pair: tuple[PlaceholderRange, object]) -> int:
    return pair[0].offset


def _item_grid(item: Mapping[str, Any], key: str) -> list[int]:
    if key not in item:
        raise ValueError(f"The item holds no {key!r}")
    return [int(v) for v in torch.as_tensor(item[key].data).reshape(-1).tolist()]


def _item_seconds(item: Mapping[str, Any]) -> float:
    """A video item's ``second_per_grid_ts`` (1.0 without one, as vLLM reads it)."""
    if "second_per_grid_ts" not in item:
        return 1.0
    return float(torch.as_tensor(item["second_per_grid_ts"].data).reshape(-1)[0])


__all__ = [
    "GridInput",
    "MRopeConvention",
    "MRopePositions",
    "Qwen2VLMRope",
    "qwen2_vl_mrope_positions",
]
