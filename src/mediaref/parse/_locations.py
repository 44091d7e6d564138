"""Media items that name a location (a URL, a file path) are refused by the parse layer.

vLLM's item types hold decoded media only; URLs are fetched by the connector, under its policy
(allowed domains and paths, address checks, size caps), and arrive as refs.
"""

from __future__ import annotations

import os

from mediaref.exceptions import VLLMValidationError

# A string or a path as a media item names a location. Handed on, the HF processor would fetch the
# URL or open the file itself, with no address policy, no allowed-path check and no size cap.
_LOCATION_TYPES = (str, os.PathLike)


def _find_location(data: object, depth: int = 0) -> str | None:
    """Where in ``data`` a string or path item sits (``""`` for ``data`` itself), else None.

    Looks into lists and tuples two levels down: a modality's list of items, a video's list of
    frames, an ``(item, rate)`` or ``(frames, metadata)`` pair. Dicts are embedding fields, which
    never reach a loader.
    """
    if isinstance(data, _LOCATION_TYPES):
        return ""
    if depth < 2 and isinstance(data, (list, tuple)):
        for index, item in enumerate(data):
            found = _find_location(item, depth + 1)
            if found is not None:
                return f"[{index}]{found}"
    return None


def refuse_location_items(modality: str, data: object) -> None:
    """Raise ``VLLMValidationError`` (400) if ``data`` carries a URL or file path as media.

    vLLM's item types hold decoded media only; URLs are fetched by the connector, under its
    policy, and arrive as refs.
    """
    found = _find_location(data)
    if found is not None:
        raise VLLMValidationError(
            f"multi_modal_data[{modality!r}]{found} is a string or path; mediaref never fetches or "
            f"opens those as media. Fetch URLs with MediaConnector.fetch_{modality}() (which "
            "applies the URL policy and size caps) and pass the ref, or pass decoded media.",
            parameter=modality,
        )


__all__ = ["refuse_location_items"]
