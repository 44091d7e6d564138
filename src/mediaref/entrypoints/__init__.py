"""Entry points on top of the multimodal layer: OpenAI-style chat-message parsing.

:mod:`mediaref.entrypoints.chat_utils` turns chat messages into a conversation for the model's
chat template plus lazy media references for the renderer.
"""
