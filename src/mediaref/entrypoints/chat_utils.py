"""vLLM's pre-0.33 path of the chat utilities: :mod:`mediaref.renderers.chat_utils`, re-exported.

vLLM 0.33 moved chat utilities from ``vllm.entrypoints.chat_utils`` to
``vllm.renderers.chat_utils``; code importing the old path keeps working. This module holds no code,
and no list of its own: it takes every name of the new path's ``__all__``, and that ``__all__``.
"""

from __future__ import annotations

# A star import takes exactly the new path's __all__ (type checkers read it the same way), so the
# list of names is written once, in mediaref.renderers.chat_utils.
from mediaref.renderers.chat_utils import *  # noqa: F403
from mediaref.renderers.chat_utils import __all__ as __all__
