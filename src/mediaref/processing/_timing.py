"""Where one request's processing time goes: vLLM's per-stage :class:`TimingContext`, and
mediaref's per-phase :class:`ApplyTimings` of the two-phase apply.

Both live with processing, which records them; the registry above hands out one
:class:`TimingContext` per request (``MultiModalTimingRegistry``). Their timers are plain context
managers rather than ``@contextmanager`` generators: every request enters several, and a
disabled :class:`TimingContext` hands out one shared no-op.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field


class _StageTimer:
    """Adds a block's wall time to one stage of a :class:`TimingContext`."""

    __slots__ = ("_stage", "_stage_secs", "_start")

    def __init__(self, stage_secs: dict[str, float], stage: str) -> None:
        self._stage_secs, self._stage, self._start = stage_secs, stage, 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        elapsed = time.perf_counter() - self._start
        self._stage_secs[self._stage] = self._stage_secs.get(self._stage, 0.0) + elapsed


_NOT_TIMED = contextlib.nullcontext()


@dataclass
class TimingContext:
    """Seconds spent per processing stage of one request (recording is a no-op when disabled)."""

    enabled: bool = True
    stage_secs: dict[str, float] = field(default_factory=dict)

    @property
    def total_secs(self) -> float:
        return sum(self.stage_secs.values())

    def record(self, stage: str) -> contextlib.AbstractContextManager[None]:
        """Add the block's wall time to ``stage`` (stages repeat: their times add up)."""
        if not self.enabled:
            return _NOT_TIMED  # every request passes here several times: no generator frame
        return _StageTimer(self.stage_secs, stage)

    def get_stats_dict(self) -> dict[str, float]:
        """``{"<stage>_secs": ..., "preprocessor_total_secs": ...}``."""
        stats = {f"{stage}_secs": secs for stage, secs in self.stage_secs.items()}
        stats["preprocessor_total_secs"] = self.total_secs
        return stats


@dataclass
class ApplyTimings:
    """Where one request's two-phase apply spent its time, in seconds, and its cache outcome."""

    phase1_s: float = 0.0
    decode_wait_s: float = 0.0
    phase2_s: float = 0.0
    hf_processor_s: float = 0.0
    num_hits: int = 0
    num_misses: int = 0

    def phase(self, name: str) -> _PhaseTimer:
        """Add the block's wall time to the ``name`` field (``"phase1_s"``...)."""
        return _PhaseTimer(self, name)


class _PhaseTimer:
    """Adds a block's wall time to one field of an :class:`ApplyTimings`."""

    __slots__ = ("_name", "_start", "_timings")

    def __init__(self, timings: ApplyTimings, name: str) -> None:
        self._timings, self._name, self._start = timings, name, 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        elapsed = time.perf_counter() - self._start
        setattr(self._timings, self._name, getattr(self._timings, self._name) + elapsed)


__all__ = ["ApplyTimings", "TimingContext"]
