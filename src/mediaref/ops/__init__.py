"""Device-side operators for multimodal inputs: one op per module, each a Triton kernel with a
torch reference that is also its CPU path.

- :mod:`mediaref.ops.mm_input_norm`: fused rescale + normalize of pixel values
  (``uint8`` in, ``visual_dtype`` out, fp32 arithmetic), ``FusedMMInputNorm``.

Only torch (and Triton, where installed) are needed here; nothing imports back up the package.
"""
