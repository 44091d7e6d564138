"""Write ``tests/data/vllm_0_33_wire_vectors.json``: processed items as vLLM 0.33's render server
encodes them on the wire, for ``tests/test_serve_wire_vllm.py`` to compare mediaref's encoder with.

Run it with a vLLM 0.33.0 interpreter (a scratch venv, ``docs/performance.md`` says how to make
one), on the CPU, offline::

    VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 VLLM_PYTHON/bin/python scripts/vllm_wire_vectors.py

Each vector is an item described as data (its fields: the field kind and arguments, each value a
tensor's dtype, shape and base64 bytes, a list, or a number) and vLLM's
``encode_mm_kwargs_item`` of it (``vllm/entrypoints/scale_out/token_in_token_out/mm_serde.py``):
base64 of vLLM's ``MsgpackEncoder(size_threshold=2**62)``. The items cover what processors produce
(Qwen2-VL's image and video items, one and two a request; Qwen2-Audio's; every field kind,
``keep_on_cpu``, nested lists, numbers, every dtype a processor emits), and the items of a real
vLLM Qwen2-VL processor run on the built-in model directory.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "vllm_0_33_wire_vectors.json"
MODEL = ROOT / "src" / "mediaref" / "models" / "data" / "qwen2_vl"


def tensor(seed: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.randint(0, 200, shape, generator=generator).to(dtype)


def describe_value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        flat = value.contiguous().reshape(-1)
        raw = flat.view(torch.uint8).numpy().tobytes() if value.numel() else b""
        return {
            "tensor": str(value.dtype).removeprefix("torch."),
            "shape": list(value.shape),
            "bytes": base64.b64encode(raw).decode(),
        }
    if isinstance(value, list):
        return {"list": [describe_value(v) for v in value]}
    return {"number": value}


def describe_slice(index: Any) -> Any:
    if isinstance(index, slice):  # bounds may be 0-d tensors (flat_from_sizes' cumsum)
        return [None if v is None else int(v) for v in (index.start, index.stop, index.step)]
    return [describe_slice(i) for i in index]


def describe_field(field: Any) -> dict[str, Any]:
    from vllm.multimodal.inputs import (
        MultiModalBatchedField,
        MultiModalFlatField,
        MultiModalSharedField,
    )

    if isinstance(field, MultiModalFlatField):
        kind = {
            "kind": "flat",
            "slices": [describe_slice(s) for s in field.slices],
            "dim": field.dim,
        }
    elif isinstance(field, MultiModalSharedField):
        kind = {"kind": "shared", "batch_size": field.batch_size}
    else:
        assert isinstance(field, MultiModalBatchedField)
        kind = {"kind": "batched"}
    return {**kind, "keep_on_cpu": field.keep_on_cpu}


def describe_item(item: Any) -> dict[str, Any]:
    return {
        key: {"field": describe_field(elem.field), "data": describe_value(elem.data)}
        for key, elem in item.items()
    }


def synthetic_items() -> list[tuple[str, Any]]:
    """Items built from vLLM's field classes directly: every kind, flag and value shape."""
    from vllm.multimodal.inputs import (
        MultiModalBatchedField,
        MultiModalFieldElem,
        MultiModalFlatField,
        MultiModalKwargsItem,
        MultiModalSharedField,
    )

    def item(**fields: tuple[Any, Any]) -> Any:
        return MultiModalKwargsItem(
            {
                key: MultiModalFieldElem(data=data, field=field)
                for key, (data, field) in fields.items()
            }
        )

    flat_one = MultiModalFlatField(slices=[slice(0, 16)])
    flat_two = MultiModalFlatField(slices=[slice(0, 16), slice(16, 40)])
    grid = MultiModalBatchedField(keep_on_cpu=True)
    batched = MultiModalBatchedField()
    pixels = tensor(1, (40, 1176), torch.uint8)
    return [
        (
            "image_uint8_one",
            item(
                pixel_values=(pixels[0:16], flat_one),
                image_grid_thw=(torch.tensor([1, 4, 4]), grid),
            ),
        ),
        (
            "image_second_of_two",
            item(
                pixel_values=(pixels[16:40], flat_two),
                image_grid_thw=(torch.tensor([1, 4, 6]), grid),
            ),
        ),
        (
            "image_float32",
            item(
                pixel_values=(tensor(2, (16, 1176), torch.float32), flat_one),
                image_grid_thw=(torch.tensor([1, 4, 4]), grid),
            ),
        ),
        (
            "image_bfloat16",
            item(
                pixel_values=(tensor(3, (16, 1176), torch.bfloat16), flat_one),
                image_grid_thw=(torch.tensor([1, 4, 4]), batched),
            ),
        ),
        (
            "video_two_frames",
            item(
                pixel_values_videos=(
                    tensor(4, (32, 1176), torch.uint8),
                    MultiModalFlatField(slices=[slice(0, 32)]),
                ),
                video_grid_thw=(torch.tensor([2, 4, 4]), grid),
                second_per_grid_ts=(torch.tensor(1.0), batched),
            ),
        ),
        (
            "audio_features",
            item(
                input_features=(tensor(5, (128, 40), torch.float32), batched),
                feature_attention_mask=(tensor(6, (40,), torch.int32), batched),
            ),
        ),
        (
            "flat_dim1_tuple_slices",
            item(
                embeds=(
                    tensor(7, (2, 5, 3), torch.float16),
                    MultiModalFlatField(slices=[(slice(None), slice(0, 5))], dim=1),
                ),
            ),
        ),
        (
            "shared_and_scalars",
            item(
                shared=(tensor(8, (3,), torch.int64), MultiModalSharedField(batch_size=2)),
                count=(7, batched),
                ratio=(0.5, batched),
                mask=(tensor(9, (4,), torch.bool), batched),
            ),
        ),
        (
            "nested_list",
            item(
                patches=(
                    [tensor(10, (2, 3), torch.float32), tensor(11, (1, 3), torch.float32)],
                    batched,
                ),
            ),
        ),
        (
            "empty_tensor",
            item(
                nothing=(torch.zeros((0, 4), dtype=torch.float32), batched),
            ),
        ),
        (
            "int16_int8",
            item(
                a=(tensor(12, (3, 2), torch.int16), batched),
                b=(tensor(13, (5,), torch.int8), batched),
            ),
        ),
    ]


def processor_items() -> list[tuple[str, Any]]:
    """The items vLLM's own Qwen2-VL processor makes for one and two images, and a clip."""
    import numpy as np
    from PIL import Image
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    config = ModelConfig(model=str(MODEL), tokenizer=str(MODEL), seed=0, dtype="float32")
    processor = MULTIMODAL_REGISTRY.create_processor(config)
    tokenizer = processor.info.get_tokenizer()
    rng = np.random.default_rng(0)

    def image(width: int, height: int) -> Image.Image:
        return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))

    def run(prompt: str, data: dict[str, Any]) -> Any:
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        inputs = ProcessorInputs(ids, processor.info.parse_mm_data(data))
        return processor.apply(inputs, TimingContext())["mm_kwargs"]

    vision = "<|vision_start|><|image_pad|><|vision_end|>"
    out = []
    one = run(vision + "hi", {"image": image(64, 48)})
    out.append(("qwen2_vl_processor_one_image", one["image"][0]))
    two = run(vision * 2 + "hi", {"image": [image(64, 48), image(90, 60)]})
    out += [(f"qwen2_vl_processor_two_images_{i}", two["image"][i]) for i in range(2)]
    frames = rng.integers(0, 256, (4, 56, 84, 3), dtype=np.uint8)
    metadata = {
        "fps": 2.0,
        "duration": 2.0,
        "total_num_frames": 4,
        "frames_indices": [0, 1, 2, 3],
        "video_backend": "pyav",
        "do_sample_frames": False,
    }
    clip = run("<|vision_start|><|video_pad|><|vision_end|>hi", {"video": [(frames, metadata)]})
    out.append(("qwen2_vl_processor_clip", clip["video"][0]))
    return out


def main() -> int:
    import msgspec
    import vllm
    from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import encode_mm_kwargs_item

    vectors = [
        {"name": name, "item": describe_item(item), "vllm": encode_mm_kwargs_item(item)}
        for name, item in [*synthetic_items(), *processor_items()]
    ]
    document = {
        "about": "vLLM 0.33.0's wire encoding of processed items; see scripts/vllm_wire_vectors.py",
        "versions": {
            "vllm": vllm.__version__,
            "torch": torch.__version__,
            "msgspec": msgspec.__version__,
        },
        "vectors": vectors,
    }
    OUT.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {len(vectors)} vectors to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
