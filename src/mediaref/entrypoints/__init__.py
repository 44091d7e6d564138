"""Entry points on top of the multimodal layer (vLLM's pre-0.33 paths).

:mod:`mediaref.entrypoints.chat_utils` re-exports :mod:`mediaref.renderers.chat_utils`, where
vLLM 0.33 moved the chat utilities.
"""
