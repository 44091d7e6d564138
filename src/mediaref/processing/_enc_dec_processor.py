"""``EncDecMultiModalProcessor``: the processor of an encoder-decoder model (Whisper-like).

The HF processor and the prompt updates run on the *encoder* prompt, which the model builds
from the request's prompt (:meth:`create_encoder_prompt`); the decoder gets the request's
prompt (or :meth:`create_decoder_prompt`'s), as token ids.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TypeVar

from mediaref.inputs import MultiModalInputs
from mediaref.parse import MultiModalDataItems
from mediaref.processing._base_processor import BaseMultiModalProcessor
from mediaref.processing.context import BaseProcessingInfo, TimingContext
from mediaref.processing.inputs import ProcessorInputs

_I = TypeVar("_I", bound=BaseProcessingInfo)


class MultiModalEncDecInputs(MultiModalInputs, total=False):
    """The engine input of an encoder-decoder model: ``prompt_token_ids`` are the decoder's."""

    encoder_prompt_token_ids: list[int]
    encoder_prompt: str
    prompt: str


class EncDecMultiModalProcessor(BaseMultiModalProcessor[_I]):
    """A processor whose multimodal inputs belong to the encoder prompt."""

    skip_decoder_start_token: bool = False
    """Whether the decoder prompt already starts as the model expects (no start token added)."""

    @abstractmethod
    def create_encoder_prompt(self, prompt: list[int], mm_items: MultiModalDataItems) -> list[int]:
        """The encoder's prompt, which the HF processor and the prompt updates apply to."""

    def create_decoder_prompt(
        self, prompt: str | list[int], mm_items: MultiModalDataItems
    ) -> str | list[int]:
        """The decoder's prompt (the request's, by default)."""
        return prompt

    def apply(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext | None = None
    ) -> MultiModalEncDecInputs:
        prompt_ids = (
            self._tokenize_prompt(inputs) if isinstance(inputs.prompt, str) else inputs.prompt
        )
        encoder_inputs = ProcessorInputs(
            self.create_encoder_prompt(list(prompt_ids), inputs.mm_data_items),
            inputs.mm_data_items,
            inputs.mm_uuid_items,
            hf_processor_mm_kwargs=inputs.hf_processor_mm_kwargs,
            media_io_kwargs=inputs.media_io_kwargs,
            cache=inputs.cache,
            owned_refs=inputs.owned_refs,  # the same request: its forks are released after it
        )
        encoded = super().apply(encoder_inputs, timing_ctx)

        decoder_prompt = self.create_decoder_prompt(inputs.prompt, inputs.mm_data_items)
        if isinstance(decoder_prompt, str):
            decoder_ids = self.info.get_tokenizer().encode(decoder_prompt, add_special_tokens=False)
        else:
            decoder_ids = list(decoder_prompt)
        result = MultiModalEncDecInputs(
            type="multimodal",
            prompt_token_ids=decoder_ids,
            encoder_prompt_token_ids=encoded["prompt_token_ids"],
            mm_kwargs=encoded["mm_kwargs"],
            mm_hashes=encoded["mm_hashes"],
            mm_placeholders=encoded["mm_placeholders"],
        )
        if isinstance(decoder_prompt, str):
            result["prompt"] = decoder_prompt
        if "cache_salt" in encoded:
            result["cache_salt"] = encoded["cache_salt"]
        if "mm_device_do_normalize" in encoded:
            result["mm_device_do_normalize"] = encoded["mm_device_do_normalize"]
        return result


__all__ = ["EncDecMultiModalProcessor", "MultiModalEncDecInputs"]
