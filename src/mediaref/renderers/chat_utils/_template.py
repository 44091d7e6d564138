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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2
import jinja2.nodes

from mediaref.exceptions import VLLMValidationError
from mediaref.processing.context import BaseProcessingInfo
from mediaref.renderers.chat_utils._model import ModelLike, resolve_processing_info
from mediaref.renderers.chat_utils.types import (
    ChatTemplateContentFormat,
    ChatTemplateContentFormatOption,
)

_CONTENT_LOOP = re.compile(r"for\s+\w+\s+in\s+\w+\s*(\[\s*['\"]content['\"]\s*\]|\.content\b)")
_PROBE_BEFORE = "<<mediaref-placeholder-probe-before>>"
_PROBE_AFTER = "<<mediaref-placeholder-probe-after>>"
# Arguments of apply_chat_template, and the variables it hands the template itself, that
# chat_template_kwargs must not smuggle in.
_RESERVED_TEMPLATE_ARGS = frozenset(
    {
        "conversation",
        "messages",
        "documents",
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


def _template_knows_developer(template: str) -> bool:
    # vLLM's test: the role's name quoted anywhere in the template's source.
    return '"developer"' in template or "'developer'" in template


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = [
        part if isinstance(part, str) else part.get("text", "")
        for part in content or ()
        if isinstance(part, str) or (isinstance(part, Mapping) and "text" in part)
    ]
    return "\n".join(texts)


def developer_as_system(
    conversation: Sequence[Mapping[str, Any]], template: str
) -> Sequence[Mapping[str, Any]]:
    """``conversation`` as vLLM 0.33 renders it with a template that has no ``developer`` role:
    each developer message becomes a system message (its ``tools`` dropped), and when a system
    message then stands anywhere but first (or there are several), all of them are merged, their
    texts joined by a blank line, into one system message at the start. Unchanged otherwise."""
    if _template_knows_developer(template) or not any(
        message.get("role") == "developer" for message in conversation
    ):
        return conversation
    converted: list[Mapping[str, Any]] = []
    for message in conversation:
        if message.get("role") == "developer":
            message = {k: v for k, v in message.items() if k != "tools"} | {"role": "system"}
        converted.append(message)
    systems = [i for i, message in enumerate(converted) if message.get("role") == "system"]
    if systems in ([], [0]):
        return converted
    texts = [_text_of(converted[i].get("content", "")) for i in systems]
    merged = {"role": "system", "content": "\n\n".join(text for text in texts if text)}
    return [merged, *(m for m in converted if m.get("role") != "system")]


class ModelChatTemplate:
    """The chat template a request renders with: the request's own, else the model's."""

    def __init__(
        self,
        info: BaseProcessingInfo | Callable[[], BaseProcessingInfo | None] | None,
        chat_template: str | None = None,
    ) -> None:
        # A callable is asked on first need (the tracker resolves the model's processing info
        # only when something needs it, as vLLM's resolves its processor).
        self._info_source = info
        self._override = chat_template
        self._placeholders: dict[tuple[str, int], str | None] = {}
        self._lock = threading.Lock()

    @property
    def _info(self) -> BaseProcessingInfo | None:
        source = self._info_source
        return source if source is None or isinstance(source, BaseProcessingInfo) else source()

    def _model_info(self) -> BaseProcessingInfo:
        if self._info is None:  # a text-only model under vLLM: its renderer owns the template
            raise VLLMValidationError(
                "the model has no multimodal processor to read its chat template from; pass "
                "the template, and a content format other than 'auto'",
                parameter="chat_template",
            )
        return self._info

    @property
    def source(self) -> str:
        """The template this request renders with."""
        return self._override if self._override is not None else self.model_source

    @property
    def model_source(self) -> str:
        """The model's own template (the tokenizer's, else the HF processor's)."""
        info = self._model_info()
        template = getattr(info.get_tokenizer(), "chat_template", None)
        if not isinstance(template, str):
            template = getattr(info.get_hf_processor(), "chat_template", None)
        if not isinstance(template, str):
            raise VLLMValidationError(
                f"the model {info.model_id!r} has no chat template; pass one",
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
        conversation = developer_as_system(conversation, source)
        try:
            rendered = (
                self._model_info()
                .get_tokenizer()
                .apply_chat_template(
                    list(conversation),
                    chat_template=source,
                    tokenize=False,
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=continue_final_message,
                    tools=list(tools) if tools is not None else None,
                    **extra,
                )
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
        except TypeError as exc:
            # A template kwarg HF's renderer cannot take alongside its own (vLLM answers 400).
            raise VLLMValidationError(
                f"chat_template_kwargs do not fit the chat template: {exc}",
                parameter="chat_template_kwargs",
            ) from exc
        return str(rendered)

    def placeholder(self, modality: str, ordinal: int) -> str | None:
        """The model's text for the ``ordinal``-th (1-based) ``modality`` item of a prompt.

        None when the model has none: its processing info defines no ``get_placeholder_str`` and
        its own template writes nothing for such a part (or it has no template at all).
        """
        memo_key = (modality, ordinal)
        with self._lock:
            if memo_key in self._placeholders:
                return self._placeholders[memo_key]
        hook = getattr(self._info, "get_placeholder_str", None)
        found = hook(modality, ordinal) if callable(hook) else self._probe(modality, ordinal)
        text = str(found) if found else None
        with self._lock:
            self._placeholders[memo_key] = text
        return text

    def _probe(self, modality: str, ordinal: int) -> str:
        try:
            model_template = self.model_source
        except VLLMValidationError:
            return ""  # no template of the model's own: nothing to read a placeholder off
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
        try:
            rendered = self.render(probe, add_generation_prompt=False, template=model_template)
        except VLLMValidationError:
            return ""  # the template refuses a lone part of this modality: nothing to read off
        start = rendered.find(_PROBE_BEFORE)
        end = rendered.find(_PROBE_AFTER, start + 1)
        return rendered[start + len(_PROBE_BEFORE) : end] if 0 <= start < end else ""


class ModelPlaceholders:
    """What vLLM asks of a model class for chat: ``get_placeholder_str(modality, i)``.

    mediaref has no model classes; a model's placeholder text comes from its processing info's
    ``get_placeholder_str`` hook, else from what its own chat template writes for the part.
    """

    def __init__(self, template: ModelChatTemplate) -> None:
        self._template = template

    def get_placeholder_str(self, modality: str, i: int) -> str | None:
        """The text standing for the ``i``-th (1-based) ``modality`` item; None if there is none."""
        return self._template.placeholder(modality.removesuffix("_embeds"), i)


def resolve_chat_template_content_format(
    model_config: ModelLike,
    content_format: ChatTemplateContentFormatOption = "auto",
    *,
    chat_template: str | None = None,
) -> ChatTemplateContentFormat:
    """``"openai"`` or ``"string"``: the given format, or for ``"auto"`` the one the template expects."""
    template = ModelChatTemplate(resolve_processing_info(model_config), chat_template)
    return template.resolve_content_format(content_format)


def apply_chat_template(
    model_config: ModelLike,
    conversation: Sequence[Mapping[str, Any]],
    *,
    chat_template: str | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The prompt text: ``conversation`` rendered with ``chat_template`` or the model's own.

    ``chat_template_kwargs`` reach the template as variables (e.g. Qwen2-VL's ``add_vision_id``).
    """
    template = ModelChatTemplate(resolve_processing_info(model_config), chat_template)
    return template.render(
        conversation,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        tools=tools,
        chat_template_kwargs=chat_template_kwargs,
    )


__all__ = [
    "ModelChatTemplate",
    "ModelPlaceholders",
    "apply_chat_template",
    "detect_content_format",
    "developer_as_system",
    "resolve_chat_template_content_format",
]
