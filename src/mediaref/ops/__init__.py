"""Device-side operators for multimodal inputs: one op per module, each a Triton kernel with a
torch twin that is also its CPU path and test oracle.

- :mod:`mediaref.ops.mm_input_norm`: vLLM 0.33.0's fused rescale + normalize of pixel values
  (``uint8`` in, ``visual_dtype`` out, fp32 arithmetic): ``fused_mm_input_norm_triton``,
  ``FusedMMInputNorm``, ``IdentityInputNorm``, ``NormParams``, ``build_mm_input_norm``.

Only torch (and Triton, where installed) are needed here; nothing imports back up the package.
"""
