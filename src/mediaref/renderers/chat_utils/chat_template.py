"""Where a server's chat template comes from: its configuration, a file, or a built-in name.

A template setting is a file path, a template's own text, or the name of a built-in template.
mediaref's built-in templates are those of its built-in models (``qwen2_vl``, ``qwen2_audio``,
see :mod:`mediaref.models.builtin`), where vLLM ships a folder of its own. Loading opens files:
it is for a server's configuration, never for a string an untrusted request supplied.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from mediaref.exceptions import VLLMValidationError
from mediaref.models.builtin import BUILTIN_MODEL_NAMES, builtin_model_path
from mediaref.renderers.chat_utils.types import ChatTemplateContentFormatOption

# A template's text has at least one of these; a name or a path has none.
_JINJA_CHARS = "{}\n"


@dataclass
class ChatTemplateConfig:
    """A server's chat-template settings (vLLM's ``--chat-template*`` and ``--trust-request-*``)."""

    chat_template: str | None = None
    chat_template_content_format: ChatTemplateContentFormatOption = "auto"
    trust_request_chat_template: bool = False
    """Whether a request may bring its own template (``chat_template`` in the request body)."""
    trust_request_mm_kwargs: bool = False
    """Whether a request may set ``mm_processor_kwargs`` / ``media_io_kwargs`` itself."""


def _looks_like_text(template: str) -> bool:
    return any(char in template for char in _JINJA_CHARS)


def _builtin_template_path(name: str) -> Path | None:
    """The built-in model template ``name`` (``qwen2_vl`` or ``qwen2_vl.jinja``) names, if any."""
    stem = name.removesuffix(".jinja")
    if stem not in BUILTIN_MODEL_NAMES:
        return None
    return builtin_model_path(stem) / "chat_template.jinja"


def _exists(path: str | Path) -> bool:
    try:
        return Path(path).exists()
    except (OSError, ValueError):  # a name too long for the OS, or with a NUL in it
        return False


def validate_chat_template(chat_template: Path | str | None) -> None:
    """Raise if ``chat_template`` cannot be a template: a missing path, or a name of nothing.

    None passes. A :class:`~pathlib.Path` must exist (``FileNotFoundError``). A string without
    template syntax must be an existing path or a built-in template's name
    (:class:`~mediaref.exceptions.VLLMValidationError` otherwise); any other type is refused.
    """
    if chat_template is None:
        return
    if isinstance(chat_template, Path):
        if not chat_template.exists():
            raise FileNotFoundError("the supplied chat template path doesn't exist")
        return
    if not isinstance(chat_template, str):
        raise VLLMValidationError(
            f"{type(chat_template)} is not a valid chat template type", parameter="chat_template"
        )
    if _looks_like_text(chat_template) or _exists(chat_template):
        return
    if _builtin_template_path(chat_template) is None:
        raise VLLMValidationError(
            f"The supplied chat template string ({chat_template}) appears path-like, but doesn't "
            f"exist! It is neither a file nor a built-in template ({', '.join(BUILTIN_MODEL_NAMES)})",
            parameter="chat_template",
        )


def _read(path: str | Path) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def _load(chat_template: Path | str | None, is_literal: bool) -> str | None:
    if chat_template is None:
        return None
    if is_literal:
        if isinstance(chat_template, Path):
            raise TypeError("chat_template is expected to be read directly from its value")
        return chat_template
    try:
        return _read(chat_template)
    except (OSError, ValueError) as exc:
        if isinstance(chat_template, Path):
            raise
        if _looks_like_text(chat_template):
            return chat_template  # not a path: the template's own text
        builtin = _builtin_template_path(chat_template)
        if builtin is not None:
            return _read(builtin)
        raise VLLMValidationError(
            f"The supplied chat template ({chat_template}) looks like a file path, but it failed "
            f"to be opened, and it names no built-in template. Reason: {exc}",
            parameter="chat_template",
        ) from exc


@functools.lru_cache(maxsize=128)
def _load_memoized(chat_template: Path | str | None, is_literal: bool) -> str | None:
    return _load(chat_template, is_literal)


def load_chat_template(chat_template: Path | str | None, *, is_literal: bool = False) -> str | None:
    """The template's text: ``chat_template`` read as a file, else taken as the text itself.

    With ``is_literal`` the value is the text (a :class:`~pathlib.Path` is then a ``TypeError``).
    A string without template syntax that opens as no file may name a built-in template; else it
    is a :class:`~mediaref.exceptions.VLLMValidationError`. Results are memoized per argument, as
    a server loads the same setting on every request (a file edited later is not re-read).
    """
    return _load_memoized(chat_template, is_literal)


__all__ = ["ChatTemplateConfig", "load_chat_template", "validate_chat_template"]
