"""The main job: fetch the shipped sample image lazily and process it with the built-in default model.

``python -m mediaref`` (or ``mediaref-demo``) runs fully offline:

1. fetches ``assets/sample.jpg`` through :class:`MediaConnector` as a ``file:`` URL — a lazy
   :class:`MediaRef` whose key comes from the bytes and the decode spec, with no pixel decode;
2. decodes it and reports the header-only fetch against the full decode;
3. renders a chat-style request with the image through the built-in Qwen2-VL model (a real
   ``transformers`` ``Qwen2VLProcessor`` loaded from a directory inside the package), twice:
   the first request is a cache miss, the second a hit that neither decodes nor runs HF.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from importlib import resources
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "qwen2_vl"
PROMPT = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
    "What is in this image?<|im_end|>\n<|im_start|>assistant\n"
)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mediaref", description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, help="an image file (default: the shipped sample)")
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="a built-in model name or a model directory"
    )
    args = parser.parse_args(argv)

    from mediaref import ImageMediaIO, MediaConnector
    from mediaref.models.builtin import BUILTIN_MODEL_NAMES, builtin_model_path
    from mediaref.processing.context import ModelConfig
    from mediaref.renderers.base import BaseRenderer, MultiModalRequest

    with resources.as_file(resources.files("mediaref") / "assets" / "sample.jpg") as sample:
        image_path = (args.image or sample).resolve()
        connector = MediaConnector(allowed_local_media_path=str(image_path.parent))
        connector.fetch_image(image_path.as_uri(), ImageMediaIO())  # warm: first-use imports

        start = time.perf_counter()
        ref = connector.fetch_image(image_path.as_uri(), ImageMediaIO())
        fetch_s = time.perf_counter() - start
        start = time.perf_counter()
        image = ref.decode()
        decode_s = time.perf_counter() - start

    print(
        f"image      {image_path.name}: {len(ref.data)} bytes, {image.width}x{image.height} {image.mode}"
    )
    print(f"key        {ref.key.hex()}")
    print(f"fetch+key  {_ms(fetch_s)}   (header parse + sha256; no pixels decoded)")
    print(f"decode     {_ms(decode_s)}   ({decode_s / max(fetch_s, 1e-9):.1f}x the fetch)")

    model = str(builtin_model_path(args.model)) if args.model in BUILTIN_MODEL_NAMES else args.model
    renderer: BaseRenderer[Any] = BaseRenderer(ModelConfig(model=model))
    try:
        renderer.start_mm_warmup().result()

        async def render_twice() -> None:
            for label in ("miss", "hit", "hit"):
                fresh = connector.fetch_image(image_path.as_uri(), ImageMediaIO())
                start = time.perf_counter()
                out = await renderer.process_multimodal_async(
                    MultiModalRequest(PROMPT, {"image": fresh})
                )
                elapsed = time.perf_counter() - start
                data = out["mm_kwargs"].get_data()
                (placeholder,) = out["mm_placeholders"]["image"]
                print(
                    f"render {label:<4}{_ms(elapsed)}   {len(out['prompt_token_ids'])} prompt tokens, "
                    f"{placeholder.length} image tokens at {placeholder.offset}, "
                    f"pixel_values {tuple(data['pixel_values'].shape)}, "
                    f"grid_thw {data['image_grid_thw'].tolist()}, decoded={fresh.is_decoded}"
                )

        asyncio.run(render_twice())
    finally:
        renderer.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
