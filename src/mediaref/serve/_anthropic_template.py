"""What a Messages request's rendering asks of the model's chat template, probed as vLLM 0.33
probes it.

Two conversions have no answer in the request itself, only in the template it renders through:

- whether inline ``system`` messages stay where they are or merge into the first
  (:func:`merges_inline_system`: some templates, Qwen2.5's among them, refuse a system message
  past the first);
- which reasoning effort ``thinking.type: disabled`` sends (:func:`disabled_thinking_effort`:
  ``none`` only where the template renders it differently from every thinking effort).

Both render the template on a small probe conversation; their answers depend on the template
alone, so they are cached rather than probed per request.
"""

from __future__ import annotations

import functools
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox

from mediaref.processing.context import BaseProcessingInfo
from mediaref.renderers.base import BaseRenderer
from mediaref.renderers.chat_utils import apply_chat_template, resolve_processing_info
from mediaref.serve import _chat_bridge as bridge
from mediaref.serve._anthropic_shapes import EFFORTS

# The conversation vLLM renders to learn whether a template takes a system message past the first.
_INLINE_SYSTEM_PROBE = [
    {"role": "system", "content": "t"},
    {"role": "user", "content": "t"},
    {"role": "system", "content": "t"},
    {"role": "user", "content": "t"},
]


def template_source(info: BaseProcessingInfo) -> str | None:
    """The model's own chat template (the tokenizer's, else the HF processor's)."""
    for owner in (info.get_tokenizer, info.get_hf_processor):
        template = getattr(owner(), "chat_template", None)
        if isinstance(template, str):
            return template
    return None


@functools.lru_cache(maxsize=64)
def merges_inline_system(template: str | None) -> bool:
    """Whether a template needs every system message first (vLLM's ``_detect_merge_inline_system``:
    it renders system, user, system, user in a plain sandbox; a template error means yes)."""
    if not template:
        return True
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    try:
        environment.from_string(template).render(
            messages=_INLINE_SYSTEM_PROBE, add_generation_prompt=False
        )
    except Exception:  # a template error (vLLM's case), or one that fails some other way
        return True
    return False


def _probe_prompt(info: BaseProcessingInfo, effort: str) -> str | None:
    kwargs = bridge.effort_kwargs(None, effort)
    try:
        return apply_chat_template(
            info, [{"role": "user", "content": "Hi"}], chat_template_kwargs=kwargs
        )
    except Exception:  # the template refuses the effort
        return None


@functools.lru_cache(maxsize=32)
def disabled_thinking_effort(info: BaseProcessingInfo) -> str:
    """The effort ``thinking.type: disabled`` sends (vLLM's ``DisabledThinkingEffortResolver``):
    ``none`` where the template renders it apart from every thinking effort, else ``low``."""
    prompt = _probe_prompt(info, "none")
    if prompt is None or any(_probe_prompt(info, e) == prompt for e in EFFORTS):
        return "low"
    return "none"


def processing_info(renderer: BaseRenderer[Any]) -> BaseProcessingInfo:
    """The renderer's model's processing info, which owns the template the probes render."""
    processor = renderer.mm_processor
    return (
        processor.info if processor is not None else resolve_processing_info(renderer.model_config)
    )


__all__ = [
    "disabled_thinking_effort",
    "merges_inline_system",
    "processing_info",
    "template_source",
]
