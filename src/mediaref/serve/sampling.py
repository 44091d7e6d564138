"""The render routes' sampling fields, validated and resolved as vLLM 0.33 validates them.

vLLM refuses a bad sampling value in three places, each a 400 to the client: the request model
(``ChatCompletionRequest`` / ``CompletionRequest``: pydantic types, ``seed`` within int64, at
most four ``stop`` strings, ``check_logprobs``), ``TokenizeParams`` (no ``max_tokens`` beyond
the model's context) and ``SamplingParams._verify_args`` (finite temperature in [0, 2],
penalties in range, ``top_p`` in (0, 1], ``min_p`` in [0, 1], ``n`` in [1, 16384], ``top_k`` at
least -1, ``max_tokens`` at least 1 and at least ``min_tokens``, no empty stop string or bad
word, ``n`` 1 when sampling is greedy). :func:`parse_sampling` applies every check the request
alone decides, before anything is rendered; :meth:`SamplingRequest.resolve` the ones that need
the prompt's length. Every integer is also held to int64, where vLLM's render leaves some
unbounded: JSON allows any size, the engine's MessagePack transport does not.

Values come out as ``SamplingParams.__post_init__`` leaves them (a temperature under 0.01 raised
to it, ``seed`` -1 as no seed, greedy sampling's ``top_p`` / ``top_k`` / ``min_p`` reset,
repeated stop token ids and bad words dropped), so the response's ``sampling_params`` holds
what vLLM's would, over the defaults of :data:`SAMPLING_DEFAULTS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mediaref.exceptions import VLLMValidationError
from mediaref.serve import _fields as f

MAX_N_SEQUENCES = 16384
"""The most sequences one request may ask for (vLLM's ``VLLM_MAX_N_SEQUENCES`` default)."""

MAX_STOP_STRINGS = 4
"""The most stop strings one request may carry (vLLM's ``VLLM_MAX_STOP_STRINGS`` default)."""

# vLLM's _MAX_TEMP: a positive temperature under it makes NaN/inf logits, so it is raised to it.
_MIN_TEMPERATURE = 1e-2
# vLLM's _SAMPLING_EPS: a temperature under it is greedy sampling.
_GREEDY_BELOW = 1e-5

# vLLM's request defaults for the SamplingParams fields a request leaves unset.
SAMPLING_DEFAULTS: Mapping[str, Any] = {
    "n": 1,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "seed": None,
    "stop": [],
    "stop_token_ids": [],
    "bad_words": [],
    "allowed_token_ids": None,
    "ignore_eos": False,
    "max_tokens": None,
    "min_tokens": 0,
    "logprobs": None,
    "prompt_logprobs": None,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "detokenize": True,
}

_FLOAT_FIELDS = (
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "temperature",
    "top_p",
    "min_p",
)
_SWITCHES = (
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
)
# Fields whose vLLM type is not optional: an explicit null fails its pydantic validation.
_NOT_NULL = (
    "min_tokens",
    "ignore_eos",
    "include_stop_str_in_output",
    "spaces_between_special_tokens",
    "bad_words",
    "use_beam_search",
)
_NOT_NULL_CHAT = ("echo",)
_NOT_NULL_COMPLETION = ("n",)


def _refuse(name: str, message: str) -> VLLMValidationError:
    return VLLMValidationError(message, parameter=name)


def resolve_max_tokens(requested: int | None, prompt_len: int, max_model_len: int) -> int:
    """vLLM's ``get_max_tokens``: the request's, capped by the context the prompt leaves."""
    if prompt_len > max_model_len:
        raise VLLMValidationError(
            f"Input length ({prompt_len}) exceeds model's maximum context length "
            f"({max_model_len}).",
            parameter="messages",
        )
    left = max_model_len - prompt_len
    return left if requested is None else min(requested, left)


@dataclass(frozen=True)
class SamplingRequest:
    """A request's sampling fields, validated: what it set, and its output budget."""

    params: Mapping[str, Any] = field(default_factory=dict)
    """The ``SamplingParams`` fields the client set, by name, validated and normalized."""
    max_tokens: int | None = None
    """The output budget asked for (``max_completion_tokens``, else ``max_tokens``)."""
    max_tokens_param: str = "max_tokens"
    """The field ``max_tokens`` came from: the one its errors name."""
    generate_one: bool = False
    """A completions request with ``echo`` and ``max_tokens`` 0: vLLM generates one token."""

    def resolve(self, prompt_len: int, max_model_len: int) -> dict[str, Any]:
        """``sampling_params`` for a prompt of ``prompt_len`` tokens: the defaults overlaid by
        the request's values, ``max_tokens`` capped by the context the prompt leaves."""
        requested, param = self.max_tokens, self.max_tokens_param
        if requested is not None and requested > max_model_len:  # vLLM's TokenizeParams
            raise _refuse(
                param,
                f"{param}={requested} cannot be greater than max_model_len={max_model_len}. "
                "Please request fewer output tokens.",
            )
        max_tokens = resolve_max_tokens(requested, prompt_len, max_model_len)
        if self.generate_one:
            max_tokens = 1
        if max_tokens < 1:  # the prompt fills the context
            raise _refuse(param, f"max_tokens must be at least 1, got {max_tokens}.")
        min_tokens = self.params.get("min_tokens", 0)
        if min_tokens > max_tokens:
            raise _refuse(
                "min_tokens",
                f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                f"got {min_tokens}.",
            )
        return {**SAMPLING_DEFAULTS, **self.params, "max_tokens": max_tokens}


def parse_sampling(body: Mapping[str, Any], *, chat: bool, stream: bool) -> SamplingRequest:
    """A request's sampling fields, each checked as vLLM checks it (a 400 naming the field)."""
    f.refuse_nulls(body, _NOT_NULL + (_NOT_NULL_CHAT if chat else _NOT_NULL_COMPLETION))
    if f.get_bool(body, "use_beam_search", False):
        raise _refuse("use_beam_search", "Beam search is not supported by the render endpoint")
    echo = bool(f.get_bool(body, "echo", False))
    params: dict[str, Any] = {
        **_floats(body),
        **_integers(body),
        **_word_lists(body),
        **{name: f.get_bool(body, name, None) for name in _SWITCHES},
        **_logprobs(body, chat=chat, stream=stream, echo=echo),
    }
    params = {name: value for name, value in params.items() if value is not None}
    _normalize(params)
    max_tokens, param = _max_tokens(body, chat=chat)
    generate_one = not chat and echo and max_tokens == 0
    if max_tokens is not None and max_tokens < 1 and not generate_one:
        raise _refuse(param, f"{param} must be at least 1, got {max_tokens}.")
    return SamplingRequest(params, max_tokens, param, generate_one)


def _floats(body: Mapping[str, Any]) -> dict[str, float | None]:
    # pydantic lets NaN and ±inf into these float fields (JSON's NaN / Infinity included):
    # SamplingParams._verify_args is what refuses them, with these messages.
    values = {name: f.get_float(body, name, None) for name in _FLOAT_FIELDS}
    for name in ("presence_penalty", "frequency_penalty"):
        value = values[name]
        if value is not None and not -2.0 <= value <= 2.0:
            raise _refuse(name, f"{name} must be in [-2, 2], got {value}.")
    penalty = values["repetition_penalty"]
    if penalty is not None and not math.isfinite(penalty):
        raise _refuse(
            "repetition_penalty", f"repetition_penalty must be a finite number, got {penalty}."
        )
    if penalty is not None and penalty <= 0.0:
        raise _refuse(
            "repetition_penalty", f"repetition_penalty must be greater than zero, got {penalty}."
        )
    _check_temperature(values["temperature"])
    top_p, min_p = values["top_p"], values["min_p"]
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise _refuse("top_p", f"top_p must be in (0, 1], got {top_p}.")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise _refuse("min_p", f"min_p must be in [0, 1], got {min_p}.")
    return values


def _check_temperature(value: float | None) -> None:
    if value is None:
        return
    if not math.isfinite(value):
        raise _refuse("temperature", f"temperature must be a finite number, got {value}.")
    if value < 0.0:
        raise _refuse("temperature", f"temperature must be non-negative, got {value}.")
    if value > 2.0:
        raise _refuse("temperature", f"temperature must be in [0, 2], got {value}.")


def _int(body: Mapping[str, Any], name: str) -> int | None:
    """An integer field of any size (its range is checked by the caller, in vLLM's words)."""
    value = body.get(name)
    if value is None:
        return None
    number = f.as_int(value)
    if number is None:
        raise f.refuse(name, "an integer", value)
    return number


def _integers(body: Mapping[str, Any]) -> dict[str, int | None]:
    n, top_k, seed, min_tokens = (_int(body, name) for name in ("n", "top_k", "seed", "min_tokens"))
    if n is not None and n < 1:
        raise _refuse("n", f"n must be at least 1, got {f.shown(n)}.")
    if n is not None and n > MAX_N_SEQUENCES:
        raise _refuse("n", f"n must be at most {MAX_N_SEQUENCES}, got {f.shown(n)}.")
    if top_k is not None and top_k < -1:  # -1 is accepted quietly as 0: all tokens
        raise _refuse("top_k", f"top_k must be 0 (disable), or at least 1, got {f.shown(top_k)}.")
    if min_tokens is not None and min_tokens < 0:
        raise _refuse(
            "min_tokens",
            f"min_tokens must be greater than or equal to 0, got {f.shown(min_tokens)}.",
        )
    values = {"n": n, "top_k": top_k, "seed": seed, "min_tokens": min_tokens}
    for name, value in values.items():
        if value is not None:
            f.check_int(name, value)  # int64 (seed's bound is vLLM's own pydantic constraint)
    return values


def _word_lists(body: Mapping[str, Any]) -> dict[str, list[Any] | None]:
    stop = f.get_str_list(body, "stop", single=True)
    if stop is not None and len(stop) > MAX_STOP_STRINGS:
        raise _refuse("stop", f"stop may hold at most {MAX_STOP_STRINGS} strings, got {len(stop)}.")
    if stop is not None and not all(stop):
        raise _refuse("stop", "stop cannot contain an empty string.")
    bad_words = f.get_str_list(body, "bad_words", single=False)
    if bad_words is not None and not all(bad_words):
        raise _refuse("bad_words", "bad_words cannot contain an empty string.")
    stop_token_ids = f.get_int_list(body, "stop_token_ids")
    return {
        "stop": stop,
        # SamplingParams drops repeats, keeping the first of each.
        "stop_token_ids": None if stop_token_ids is None else list(dict.fromkeys(stop_token_ids)),
        "bad_words": None if bad_words is None else list(dict.fromkeys(bad_words)),
        "allowed_token_ids": f.get_int_list(body, "allowed_token_ids"),
    }


def _logprob_count(body: Mapping[str, Any], name: str) -> int | None:
    """``prompt_logprobs`` / ``logprobs`` / ``top_logprobs``: an integer, positive or -1."""
    value = body.get(name)
    if value is None:
        return None
    number = f.as_int(value)
    if number is None:
        raise _refuse(name, f"`{name}` must be an integer.")
    if number < 0 and number != -1:
        raise _refuse(name, f"`{name}` must be a positive value or -1.")
    return f.check_int(name, number)


def _logprobs(
    body: Mapping[str, Any], *, chat: bool, stream: bool, echo: bool
) -> dict[str, int | None]:
    """vLLM's ``check_logprobs`` and what ``to_sampling_params`` makes of the fields: chat's
    ``logprobs`` is a switch and ``top_logprobs`` the count; completions' ``logprobs`` the count.
    With ``echo``, an unset ``prompt_logprobs`` takes the count."""
    prompt = _logprob_count(body, "prompt_logprobs")
    if prompt is not None and stream and (prompt > 0 or prompt == -1):
        raise _refuse("prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`.")
    if chat:
        count = _logprob_count(body, "top_logprobs") or 0
        wanted = bool(f.get_bool(body, "logprobs", False))
        if count != 0 and not wanted:
            raise _refuse(
                "top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true."
            )
        logprobs: int | None = count if wanted else None
        echoed: int | None = count
    else:
        logprobs = echoed = _logprob_count(body, "logprobs")
    if prompt is None and echo:
        prompt = echoed
    return {"logprobs": logprobs, "prompt_logprobs": prompt}


def _normalize(params: dict[str, Any]) -> None:
    """What ``SamplingParams.__post_init__`` changes, in its order (after its checks pass)."""
    temperature = params.get("temperature", SAMPLING_DEFAULTS["temperature"])
    if 0 < temperature < _MIN_TEMPERATURE:
        temperature = params["temperature"] = _MIN_TEMPERATURE
    if params.get("seed") == -1:
        del params["seed"]  # -1 means no seed
    if temperature < _GREEDY_BELOW:
        n = params.get("n", 1)
        if n > 1:
            raise _refuse("n", f"n must be 1 when using greedy sampling, got {n}.")
        params.update(top_p=1.0, top_k=0, min_p=0.0)


# vLLM's RequestOutputKind: a streamed request's outputs come as deltas, else only the last.
_DELTA, _FINAL_ONLY = 1, 2
# SamplingParams' defaults that its dump leaves out (its omit_defaults), for the fields whose
# value a render request takes as a cached int or a singleton: those equal to the default are
# the default object, so msgspec omits them. Floats and lists come out new and always show.
_OMITTED_WHEN = {
    "n": 1,
    "top_k": 0,
    "seed": None,
    "ignore_eos": False,
    "max_tokens": 16,
    "min_tokens": 0,
    "logprobs": None,
    "prompt_logprobs": None,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "allowed_token_ids": None,
}


def sampling_params_json(params: Mapping[str, Any], *, stream: bool) -> dict[str, Any]:
    """``params`` (:meth:`SamplingRequest.resolve`'s) as vLLM's render server writes its
    ``SamplingParams``: msgspec's ``to_builtins`` with ``omit_defaults``, in the struct's field
    order, with the fields ``SamplingParams`` sets itself (``output_kind``, ``skip_clone``,
    ``output_text_buffer_length``, ``skip_reading_prefix_cache``). A greedy request's
    ``top_p`` and ``min_p`` are the defaults' own objects again, so they are left out too."""
    greedy = params["temperature"] < _GREEDY_BELOW
    stop = list(params["stop"])
    buffer = 0
    if stop and not params["include_stop_str_in_output"]:
        buffer = max(len(s) for s in stop) - 1
    fields: dict[str, Any] = {
        "n": params["n"],
        "presence_penalty": float(params["presence_penalty"]),
        "frequency_penalty": float(params["frequency_penalty"]),
        "repetition_penalty": float(params["repetition_penalty"]),
        "temperature": float(params["temperature"]),
        "top_p": None if greedy else float(params["top_p"]),
        "top_k": 0 if params["top_k"] == -1 else params["top_k"],
        "min_p": None if greedy else float(params["min_p"]),
        "seed": params["seed"],
        "stop": stop,
        "stop_token_ids": list(params["stop_token_ids"]),
        "ignore_eos": params["ignore_eos"],
        "max_tokens": params["max_tokens"],
        "min_tokens": params["min_tokens"],
        "logprobs": params["logprobs"],
        "prompt_logprobs": params["prompt_logprobs"],
        "skip_special_tokens": params["skip_special_tokens"],
        "spaces_between_special_tokens": params["spaces_between_special_tokens"],
        "include_stop_str_in_output": params["include_stop_str_in_output"],
        "output_kind": _DELTA if stream else _FINAL_ONLY,
        "skip_clone": True,
        "output_text_buffer_length": buffer or None,
        "allowed_token_ids": params["allowed_token_ids"],
        "bad_words": list(params["bad_words"]),
        "skip_reading_prefix_cache": params["prompt_logprobs"] is not None,
    }
    return {
        name: value
        for name, value in fields.items()
        if value is not None and not (name in _OMITTED_WHEN and value == _OMITTED_WHEN[name])
    }


def _max_tokens(body: Mapping[str, Any], *, chat: bool) -> tuple[int | None, str]:
    """The requested output budget and the field it came from (completions' default is 16)."""
    legacy = f.get_int(body, "max_tokens", None)
    if not chat:
        return (16 if legacy is None else legacy), "max_tokens"
    completion = f.get_int(body, "max_completion_tokens", None)
    if completion is not None:
        return completion, "max_completion_tokens"
    return legacy, "max_tokens"


__all__ = [
    "MAX_N_SEQUENCES",
    "MAX_STOP_STRINGS",
    "SAMPLING_DEFAULTS",
    "SamplingRequest",
    "parse_sampling",
    "resolve_max_tokens",
    "sampling_params_json",
]
