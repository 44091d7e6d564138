"""The package's front door: the names it re-exports, and that importing it stays cheap."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import mediaref

EXPECTED_ALL = [
    "AudioMediaIO",
    "BaseRenderer",
    "BatchedTensorInputs",
    "DecodeSpec",
    "ImageMediaIO",
    "MEDIA_CONNECTOR_REGISTRY",
    "MULTIMODAL_REGISTRY",
    "MediaConnector",
    "MediaIO",
    "MediaRef",
    "MediaRefError",
    "ModelConfig",
    "MultiModalDataParser",
    "MultiModalHasher",
    "MultiModalKwargsItems",
    "MultiModalRegistry",
    "MultiModalRequest",
    "NestedTensors",
    "VLLMUnprocessableEntityError",
    "VLLMValidationError",
    "VideoMediaIO",
    "derive_media_key",
    "fetch_audio",
    "fetch_image",
    "fetch_video",
]


def test_all_is_pinned() -> None:
    # The order is ruff's (RUF022); what is pinned is the names, each once.
    assert sorted(mediaref.__all__) == EXPECTED_ALL
    # __all__ is written out for type checkers; the lazy-import table must name the same set.
    assert sorted(mediaref._EXPORTS) == EXPECTED_ALL


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_each_export_is_the_object_from_its_home_module(name: str) -> None:
    value = getattr(mediaref, name)
    home = importlib.import_module(mediaref._EXPORTS[name])
    assert value is getattr(home, name)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = mediaref.nope  # type: ignore[attr-defined]


def test_import_is_cheap_and_reads_no_environment_settings() -> None:
    code = (
        "import sys, mediaref, mediaref.envs; "
        "heavy = [m for m in ('torch', 'PIL', 'av', 'transformers', 'aiohttp', 'soundfile') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    "module",
    [
        "mediaref.media.base",
        "mediaref.media.image",
        "mediaref.media.video",
        "mediaref.media.audio",
        "mediaref.video",
        "mediaref.media.connector",
        "mediaref.media.decode",
        "mediaref.media.executor",
        "mediaref.inputs",
        "mediaref.parse",
        "mediaref.hasher",
        "mediaref.utils",
        "mediaref.cache",
        "mediaref.processing.context",
        "mediaref.processing.inputs",
        "mediaref.processing.processor",
        "mediaref.processing.dummy_inputs",
        "mediaref.renderers.base",
        "mediaref.exceptions",
        "mediaref.registry",
        "mediaref.envs",
    ],
)
def test_architecture_map_modules_import(module: str) -> None:
    importlib.import_module(module)


ARCHITECTURE_NAMES = {
    "mediaref.media.base": ["DecodeSpec", "derive_media_key", "MediaRef", "MediaIO"],
    "mediaref.media.image": ["ImageMediaIO"],
    "mediaref.media.video": ["VideoMediaIO"],
    "mediaref.media.audio": ["AudioMediaIO"],
    "mediaref.video": ["VIDEO_LOADER_REGISTRY"],
    "mediaref.media.connector": ["MediaConnector", "MEDIA_CONNECTOR_REGISTRY"],
    "mediaref.media.decode": [
        "submit_media_decodes",
        "collect_media_decodes",
        "collect_media_decodes_async",
    ],
    "mediaref.media.executor": ["get_media_executor"],
    "mediaref.inputs": [
        "ImageItem",
        "VideoItem",
        "AudioItem",
        "MultiModalDataDict",
        "PlaceholderRange",
        "MultiModalKwargsItem",
        "MultiModalInputs",
    ],
    "mediaref.parse": [
        "ModalityDataItems",
        "ProcessorBatchItems",
        "ImageProcessorItems",
        "VideoProcessorItems",
        "AudioProcessorItems",
        "EmbeddingItems",
        "MultiModalDataItems",
        "MultiModalDataParser",
    ],
    "mediaref.hasher": ["MultiModalHasher"],
    "mediaref.utils": ["fetch_image", "fetch_video", "fetch_audio"],
    "mediaref.cache": [
        "BaseMultiModalCache",
        "MultiModalProcessorOnlyCache",
        "MultiModalProcessorSenderCache",
        "MultiModalReceiverCache",
        "MultiModalCacheMissError",
    ],
    "mediaref.processing.context": ["BaseProcessingInfo", "InputProcessingContext"],
    "mediaref.processing.inputs": ["ProcessorInputs"],
    "mediaref.processing.processor": [
        "BaseMultiModalProcessor",
        "MultiModalApplyState",
        "PromptReplacement",
        "PromptInsertion",
        "PromptIndexTargets",
        "PromptUpdateDetails",
    ],
    "mediaref.processing.dummy_inputs": ["BaseDummyInputsBuilder"],
    "mediaref.renderers.base": ["BaseRenderer"],
    "mediaref.exceptions": ["VLLMUnprocessableEntityError"],
    "mediaref.registry": ["MULTIMODAL_REGISTRY"],
}


@pytest.mark.parametrize("module", sorted(ARCHITECTURE_NAMES))
def test_architecture_map_names_exist(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in ARCHITECTURE_NAMES[module] if not hasattr(imported, name)]
    assert missing == []
    assert (
        importlib.import_module("mediaref.exceptions").VLLMUnprocessableEntityError.status_code
        == 422
    )
