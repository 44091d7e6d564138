"""Model families: how each one's HF processor is loaded, called and its prompt updated.

One module per model family plugs into :mod:`mediaref.processing` and registers itself with
:mod:`mediaref.registry`; a family with private helpers of its own is a package instead
(:mod:`mediaref.models.qwen2_vl`: its processor, the fused exact path and its C extension).
:mod:`mediaref.models.builtin` locates the small model directories mediaref ships (tokenizer,
chat template and processor configs, no weights) so that a family runs offline by default.
"""
