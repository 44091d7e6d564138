"""Video token pruning (``mediaref.video_prune``, vLLM's ``vllm.multimodal.video_prune``): EVS and
VidCom2 masks and counts, and EVS's M-RoPE position helpers, on hand-built embeddings."""

from __future__ import annotations

import pytest
import torch

from mediaref.video_prune import evs, vidcom2


def _frames(*frames: list[list[float]]) -> torch.Tensor:
    """Frames of tokens (each a list of hidden vectors) as the flat (T * tokens, hidden) input."""
    return torch.tensor([token for frame in frames for token in frame], dtype=torch.float32)


# --- EVS --------------------------------------------------------------------------------------


def test_evs_count_keeps_at_least_the_first_frame() -> None:
    assert evs.compute_retained_tokens_count(4, 3, 0.5) == 6
    assert evs.compute_retained_tokens_count(4, 3, 0.9) == 4
    assert evs.compute_retained_tokens_count(4, 3, 0.0) == 12


def test_evs_keeps_the_first_frame_and_the_tokens_that_changed_most() -> None:
    a, b, c, d = [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]
    # Frame 1 changes token 3 (orthogonal: 1 - cos = 1); frame 2 flips token 0 (1 - cos = 2).
    embeds = _frames([a, b, c, d], [a, b, c, c], [[-1.0, 0.0], b, c, c])

    mask = evs.compute_retention_mask(embeds, (3, 4, 4), 2, q=0.5)

    assert mask.tolist() == [True] * 4 + [False, False, False, True] + [True, False, False, False]
    assert int(evs.compute_retention_mask(embeds, torch.tensor([3, 4, 4]), 2, q=0.0).sum()) == 12


def test_evs_mrope_positions_of_a_media_alone() -> None:
    positions = evs.compute_mrope_for_media(torch.tensor([2, 4, 6]), 2, 2.0, 0.5)

    assert positions.shape == (12, 4)
    assert positions[:, 0].tolist() == [0] * 6 + [1] * 6  # frame index * 2.0 * 0.5
    assert positions[:6, 1].tolist() == [0, 0, 0, 1, 1, 1]
    assert positions[:6, 2].tolist() == [0, 1, 2, 0, 1, 2]
    assert positions[:, 3].tolist() == [3] * 12  # the grid width
    slow = evs.compute_mrope_for_media(torch.tensor([3, 2, 2]), 2, 0.7, 1.0)
    assert slow[:, 0].tolist() == [0, 0, 1]  # truncated


VS, IMAGE, VIDEO, TEXT = 1, 2, 3, 9
IDS = torch.tensor([TEXT, TEXT, VS, VIDEO, VIDEO, VIDEO, TEXT, TEXT])


def _stale_positions() -> torch.Tensor:
    positions = torch.zeros(3, 8, dtype=torch.long)
    positions[:, :3] = torch.arange(3)
    return positions


def test_recompute_places_a_media_after_its_vision_start_and_renumbers_the_text() -> None:
    media = torch.tensor([[0, 0, 0], [0, 0, 0], [0, 1, 2], [5, 5, 5]])  # t, h, w, grid width

    positions, delta = evs.recompute_mrope_positions(
        IDS, [media], _stale_positions(), 0, VS, IMAGE, VIDEO
    )

    # The media continues from the vision start (position 2): base 3.
    assert positions[:, 3:6].tolist() == [[3, 3, 3], [3, 3, 3], [3, 4, 5]]
    # The text after it resumes from the base plus the grid width.
    assert positions[:, 6:].tolist() == [[8, 9]] * 3
    assert positions[:, :3].tolist() == [[0, 1, 2]] * 3
    assert delta == 9 + 1 - 8


def test_recompute_continues_a_media_split_across_prefill_chunks() -> None:
    rest = torch.tensor([[0, 0], [0, 0], [1, 2], [3, 3]])  # the last two of three tokens
    stale = _stale_positions()

    positions, _ = evs.recompute_mrope_positions(IDS, [rest], stale, 4, VS, IMAGE, VIDEO)

    assert positions[:, 4:6].tolist() == [[3, 3], [3, 3], [4, 5]]
    assert torch.equal(positions[:, :4], stale[:, :4])  # an earlier chunk's positions stay


def test_recompute_leaves_positions_alone_when_no_media_remains() -> None:
    stale = _stale_positions()
    media = torch.zeros(4, 3, dtype=torch.long)
    for computed, given in ((8, [media]), (0, [])):
        positions, delta = evs.recompute_mrope_positions(
            IDS, given, stale, computed, VS, IMAGE, VIDEO
        )
        assert torch.equal(positions, stale) and delta == 2 + 1 - 8
        assert positions is not stale  # a copy: the caller's tensor is never written


# --- VidCom2 ----------------------------------------------------------------------------------


def test_vidcom2_count_keeps_a_token_per_frame() -> None:
    assert vidcom2.compute_retained_tokens_count(4, 3, 0.5) == 6
    assert vidcom2.compute_retained_tokens_count(4, 3, 0.99) == 3
    assert vidcom2.compute_retained_tokens_count(4, 3, 0.0) == 12


@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.8, 0.95])
def test_vidcom2_keeps_exactly_the_counted_tokens(q: float) -> None:
    generator = torch.Generator().manual_seed(7)
    embeds = torch.randn(5 * 9, 16, generator=generator)

    mask = vidcom2.compute_retention_mask(embeds, (5, 6, 6), 2, q)

    assert mask.dtype == torch.bool and mask.shape == (45,)
    assert int(mask.sum()) == vidcom2.compute_retained_tokens_count(9, 5, q)


def test_vidcom2_keeps_the_token_unlike_the_others() -> None:
    common = [1.0, 0.0, 0.5, 0.2]
    outlier = [1.0, 0.0, -3.0, 2.0]  # differs in the two quiet channels scored
    frame = [common, common, common, common]
    embeds = _frames(frame, [common, common, outlier, common], frame)
    embeds[:, :2] += torch.linspace(0, 5, 12).unsqueeze(1)  # loud channels, ignored

    mask = vidcom2.compute_retention_mask(embeds, (3, 4, 4), 2, q=0.75)

    assert int(mask.sum()) == 3 and bool(mask[6])


def test_vidcom2_of_an_empty_video_is_empty() -> None:
    assert vidcom2.compute_retention_mask(torch.zeros(0, 4), (0, 4, 4), 2, 0.5).shape == (0,)
