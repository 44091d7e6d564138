"""The model's chat template: rendering, content-format detection and per-item placeholders.

Templates come in two kinds. An "openai" template loops over a message's content parts and
writes each media part's placeholder itself (both built-in Qwen templates do: a
``{"type": "image"}`` part becomes ``<|vision_start|><|image_pad|><|vision_end|>``). A "string"
template only prints ``message['content']``, so the placeholders must already be in that string.
For the latter, an item's placeholder comes from the model: its processing info's
``get_placeholder_str(modality, ordinal)`` when it defines one (vLLM's hook name), else the model's
own template, if that is an "openai" one, rendered on a probe conversation with the item between
two sentinel texts. The model's template thus stays the authority on what its placeholders look
like (numbered ones like ``Audio 2: ...`` included), even when a request brings its own template.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import jinja2
import jinja2.nodes

from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import BaseProcessingInfo

ChatTemplateContentFormat = Literal["string", "openai"]
ChatTemplateContentFormatOption = Literal["auto", "string", "openai"]

_CONTENT_LOOP = re.compile(r"for\s+\w+\s+in\s+\w+\s*(\[\s*['\"]content['\"]\s*\]|\.content\b)")
_PROBE_BEFORE = "<<mediaref-placeholder-probe-before>>"
_PROBE_AFTER = "<<mediaref-placeholder-probe-after>>"
# Arguments of apply_chat_template that chat_template_kwargs must not smuggle in.
_RESERVED_TEMPLATE_ARGS = frozenset(
    {
        "conversation",
        "chat_template",
        "tokenize",
        "add_generation_prompt",
        "continue_final_message",
        "tools",
        "return_dict",
        "tokenizer_kwargs",
    }
)


def _is_content_access(node: jinja2.nodes.Node, content_names: set[str]) -> bool:
    """Whether ``node`` reads a message's content: ``m['content']``, ``m.content`` or an alias."""
    while isinstance(node, jinja2.nodes.Filter) and node.node is not None:
        node = node.node  # message['content'] | list, and the like
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == "content"
    return isinstance(node, jinja2.nodes.Name) and node.name in content_names


@functools.lru_cache(maxsize=64)
def detect_content_format(template: str) -> ChatTemplateContentFormat:
    """``"openai"`` if the template iterates over a message's content parts, else ``"string"``.

    Memoized: parsing a template costs about a millisecond, and a server sees the same few
    templates on every request.
    """
    try:
        ast = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"]).parse(
            template
        )
    except jinja2.TemplateSyntaxError:
        # A tag only the tokenizer's environment knows (e.g. transformers' {% generation %}):
        # fall back to reading the loop header off the source.
        return "openai" if _CONTENT_LOOP.search(template) else "string"
    content_names: set[str] = set()
    for assign in ast.find_all(jinja2.nodes.Assign):
        if isinstance(assign.target, jinja2.nodes.Name) and _is_content_access(
            assign.node, content_names
        ):
            content_names.add(assign.target.name)
    for loop in ast.find_all(jinja2.nodes.For):
        if _is_content_access(loop.iter, content_names):
            return "openai"
    return "string"


# Placeholders read off a template by rendering a probe conversation, per (template, modality,
# ordinal): the same for every request that renders with that template, and a render each.
_PROBED_PLACEHOLDERS_MAX = 256
_probed_placeholders: dict[tuple[str, str, int], str] = {}
_probed_lock = threading.Lock()


class ModelChatTemplate:
    """The chat template a request renders with: the request's own, else the model's."""

    def __init__(self, info: BaseProcessingInfo, chat_template: str | None = None) -> None:
        self._info = info
        self._override = chat_template
        self._placeholders: dict[tuple[str, int], str] = {}
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        """The template this request renders with."""
        return self._override if self._override is not None else self.model_source

    @property
    def model_source(self) -> str:
        """The model's own template (the tokenizer's, else the HF processor's)."""
        template = getattr(self._info.get_tokenizer(), "chat_template", None)
        if not isinstance(template, str):
            template = getattr(self._info.get_hf_processor(), "chat_template", None)
        if not isinstance(template, str):
            raise VLLMValidationError(
                f"the model {self._info.model_id!r} has no chat template; pass one",
                parameter="chat_template",
            )
        return template

    def resolve_content_format(
        self, option: ChatTemplateContentFormatOption
    ) -> ChatTemplateContentFormat:
        if option == "auto":
            return detect_content_format(self.source)
        if option not in ("string", "openai"):
            raise VLLMValidationError(
                f"chat template content format must be 'auto', 'string' or 'openai', not {option!r}",
                parameter="chat_template_content_format",
                value=option,
            )
        return option

    def render(
        self,
        conversation: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        template: str | None = None,
    ) -> str:
        """Render ``conversation`` to the prompt text (``template`` defaults to :attr:`source`)."""
        if add_generation_prompt and continue_final_message:
            raise VLLMValidationError(
                "add_generation_prompt and continue_final_message cannot both be true",
                parameter="continue_final_message",
            )
        extra = dict(chat_template_kwargs or {})
        clash = sorted(_RESERVED_TEMPLATE_ARGS.intersection(extra))
        if clash:
            raise VLLMValidationError(
                f"chat_template_kwargs may not set {', '.join(clash)}",
                parameter="chat_template_kwargs",
            )
        source = template if template is not None else self.source
        try:
            rendered = self._info.get_tokenizer().apply_chat_template(
                list(conversation),
                chat_template=source,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                tools=list(tools) if tools is not None else None,
                **extra,
            )
        except jinja2.TemplateSyntaxError as exc:
            raise VLLMValidationError(
                f"the chat template does not parse: {exc}", parameter="chat_template"
            ) from exc
        except jinja2.TemplateError as exc:
            # raise_exception() in a template: the conversation broke the template's rules.
            raise VLLMValidationError(
                f"the chat template rejected the conversation: {exc}", parameter="messages"
            ) from exc
        return str(rendered)

    def placeholder(self, modality: str, ordinal: int) -> str:
        """The model's text for the ``ordinal``-th (1-based) ``modality`` item of a prompt."""
        memo_key = (modality, ordinal)
        with self._lock:
            cached = self._placeholders.get(memo_key)
        if cached is not None:
            return cached
        hook = getattr(self._info, "get_placeholder_str", None)
        found = hook(modality, ordinal) if callable(hook) else self._probe(modality, ordinal)
        if not found:
            raise VLLMValidationError(
                f"the model has no placeholder for {modality} items, so string-format content "
                "cannot place them (its chat template writes none)",
                parameter="chat_template_content_format",
            )
        with self._lock:
            self._placeholders[memo_key] = str(found)
        return str(found)

    def _probe(self, modality: str, ordinal: int) -> str:
        model_template = self.model_source
        memo_key = (model_template, modality, ordinal)
        with _probed_lock:
            cached = _probed_placeholders.get(memo_key)
        if cached is None:
            cached = self._render_probe(model_template, modality, ordinal)
            with _probed_lock:
                if len(_probed_placeholders) >= _PROBED_PLACEHOLDERS_MAX:
                    _probed_placeholders.pop(next(iter(_probed_placeholders)))
                _probed_placeholders[memo_key] = cached
        return cached

    def _render_probe(self, model_template: str, modality: str, ordinal: int) -> str:
        if detect_content_format(model_template) != "openai":
            return ""  # a string template prints the parts' repr: nothing to read off it
        earlier = [{"type": modality}] * (ordinal - 1)  # numbered placeholders count these
        probe = [
            {
                "role": "user",
                "content": [
                    *earlier,
                    {"type": "text", "text": _PROBE_BEFORE},
                    {"type": modality},
                    {"type": "text", "text": _PROBE_AFTER},
                ],
            }
        ]
        rendered = self.render(probe, add_generation_prompt=False, template=model_template)
        start = rendered.find(_PROBE_BEFORE)
        end = rendered.find(_PROBE_AFTER, start + 1)
        return rendered[start + len(_PROBE_BEFORE) : end] if 0 <= start < end else ""


__all__ = [
    "ChatTemplateContentFormat",
    "ChatTemplateContentFormatOption",
    "ModelChatTemplate",
    "detect_content_format",
]
