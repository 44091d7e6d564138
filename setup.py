"""The one native helper: Qwen2-VL's patch rows in one pass (``models/_patch_rows_native.c``).

Everything else is in pyproject.toml. The extension is optional: where no C compiler is found
the install still succeeds and the fused path writes its rows with numpy instead (the same
bytes, about 3x slower for that step); ``tests/test_patch_rows_native.py`` fails then, so a
development install notices.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mediaref.models._patch_rows_native",
            ["src/mediaref/models/_patch_rows_native.c"],
            optional=True,
            # The module's SSE2 path is x86-64's baseline; other targets take its plain C loop.
            extra_compile_args=["-O3"],
        )
    ]
)
