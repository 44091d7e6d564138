"""The one native helper: Qwen2-VL's patch rows in one pass
(``models/qwen2_vl/_patch_rows_native.c``), resized on the way by torch's uint8 antialiased
bicubic reproduced bit for bit (``models/qwen2_vl/_aa_resize.c``).

Everything else is in pyproject.toml. The extension is optional: where no C compiler is found
the install still succeeds and the fused path resizes with torch and writes its rows with numpy
instead (the same bytes, about 2x slower for those steps); ``tests/test_patch_rows_native.py``
fails then, so a development install notices.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mediaref.models.qwen2_vl._patch_rows_native",
            [
                "src/mediaref/models/qwen2_vl/_patch_rows_native.c",
                "src/mediaref/models/qwen2_vl/_aa_resize.c",
            ],
            depends=["src/mediaref/models/qwen2_vl/_aa_resize.h"],
            optional=True,
            # SSE2 is x86-64's baseline; the resize's AVX2 loops are compiled per function
            # (target attributes) and chosen at run time; other CPUs take the plain C loops.
            extra_compile_args=["-O3"],
        )
    ]
)
