"""EVS (Efficient Video Sampling): prune the video tokens that changed least since the last frame.

A token's score is how much it differs (1 - cosine similarity) from the token at the same place
in the previous frame; the first frame's tokens always stay. ``q`` is the fraction pruned. The
M-RoPE helpers rebuild the positions of a prompt whose media tokens were pruned, for Qwen2.5-VL
style inputs (4 channels: t, h, w, grid width) and Qwen3-VL style ones (5 channels: t, h, w,
is-vision-start, is-vision, with timestamp text tokens interleaved), prefilled in chunks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Scores run 0..2 (1 - cosine similarity): this keeps the first frame above every other token.
_FIRST_FRAME_SCORE = 255.0


def compute_retained_tokens_count(tokens_per_frame: int, num_frames: int, q: float) -> int:
    """How many of a video's tokens survive pruning a fraction ``q``: never fewer than one
    frame's worth, since the first frame is always kept whole."""
    kept = int(tokens_per_frame * num_frames * (1 - q))
    return max(tokens_per_frame, kept)


def compute_retention_mask(
    video_embeds: torch.Tensor,
    video_size_thw: torch.LongTensor | tuple[int, int, int],
    spatial_merge_size: int,
    q: float,
) -> torch.Tensor:
    """Which tokens of one video to keep: a flat bool mask over its ``T * H * W / merge**2``
    tokens, in their (t, row, col) order.

    ``video_embeds``: ``(T * H * W / merge**2, hidden)`` encoder outputs; ``video_size_thw``: the
    (T, H, W) patch grid before merging. Ties keep the earlier token.
    """
    frames, height, width = (int(n) for n in video_size_thw)
    rows, cols = height // spatial_merge_size, width // spatial_merge_size
    grid = video_embeds.reshape(frames, rows, cols, video_embeds.size(-1))
    change = 1 - F.cosine_similarity(grid[1:], grid[:-1], dim=-1)
    first = torch.full_like(grid[:1, :, :, 0], _FIRST_FRAME_SCORE)
    scores = torch.cat([first, change], dim=0).reshape(-1)
    keep = compute_retained_tokens_count(rows * cols, frames, q)
    ranked = torch.argsort(scores, dim=-1, descending=True, stable=True)
    mask = torch.zeros_like(scores, dtype=torch.bool)
    mask[ranked[:keep]] = True
    return mask


def compute_mrope_for_media(
    video_size_thw: torch.LongTensor,
    spatial_merge_size: int,
    tokens_per_second: float = 1.0,
    video_second_per_grid: float = 1.0,
) -> torch.Tensor:
    """The M-RoPE positions of a video's merged tokens as if it opened the sequence.

    ``(T * h * w, 4)``: the temporal position (the frame index times ``tokens_per_second *
    video_second_per_grid``, truncated), the row, the column, and the grid width ``w`` (the
    text after the video continues from the largest position, which needs it).
    """
    frames = int(video_size_thw[0])
    rows = int(video_size_thw[1]) // spatial_merge_size
    cols = int(video_size_thw[2]) // spatial_merge_size
    t = torch.arange(frames).mul(tokens_per_second * video_second_per_grid).long()
    t_index = t.view(-1, 1, 1).expand(frames, rows, cols).reshape(-1)
    h_index = torch.arange(rows).view(1, -1, 1).expand(frames, rows, cols).reshape(-1)
    w_index = torch.arange(cols).view(1, 1, -1).expand(frames, rows, cols).reshape(-1)
    width = torch.full_like(t_index, cols)
    return torch.stack([t_index, h_index, w_index, width], dim=1)


def _delta(positions: torch.Tensor, length: int) -> int:
    return int(positions.max().item()) + 1 - length if positions.numel() else -length


def _timestamp_tokens(mm_pos: torch.Tensor) -> tuple[bool, int]:
    """For a 5-channel media: whether it has video embeddings, and how many timestamp tokens
    come before its first vision-start token (the count of text tokens it opens with)."""
    if mm_pos.shape[0] != 5 or mm_pos.shape[1] == 0 or not bool(mm_pos[4].any()):
        return False, 0
    starts = (mm_pos[3] == 1).nonzero(as_tuple=True)[0]
    return True, int(starts[0]) if len(starts) else 0


def recompute_mrope_positions(
    input_ids: torch.LongTensor,
    multimodal_positions: list[torch.Tensor],
    mrope_positions: torch.LongTensor,
    num_computed_tokens: int,
    vision_start_token_id: int,
    image_token_id: int,
    video_token_id: int,
) -> tuple[torch.LongTensor, int]:
    """Rewrite ``mrope_positions`` (3, N) for the media of this prefill chunk, and the text after.

    ``multimodal_positions``: one tensor per media (or part of one, in chunked prefill) of this
    chunk, from :func:`compute_mrope_for_media` or a model's 5-channel equivalent, positioned as
    if the media opened the sequence. Each is placed after its vision-start token (or its
    timestamp tokens), continuing from the position before it; the text that follows is
    renumbered from the media's largest position. Returns the positions and the M-RoPE delta
    (largest position + 1 - N).
    """
    positions = mrope_positions.clone()
    length = input_ids.numel()
    media = input_ids.eq(image_token_id) | input_ids.eq(video_token_id)
    if not multimodal_positions:
        return positions, _delta(positions, length)  # type: ignore[return-value]
    # Counted once, before the media of this chunk are placed (chunked-prefill bookkeeping).
    media_done = int(torch.count_nonzero(media[:num_computed_tokens]))
    if media_done == int(torch.count_nonzero(media)):
        return positions, _delta(positions, length)  # type: ignore[return-value]
    vision_starts = (input_ids == vision_start_token_id).nonzero(as_tuple=True)[0]
    computed = num_computed_tokens
    for mm_pos in multimodal_positions:
        has_video, timestamps = _timestamp_tokens(mm_pos)
        start, embeddings_done = _media_start(
            media, vision_starts, computed, media_done, has_video, timestamps
        )
        if mm_pos.shape[0] == 5 and embeddings_done == 0 and has_video:
            # Qwen3-VL: the media opens with its timestamp tokens, before the vision start.
            start -= timestamps
            base = positions[-1, start - 1] + 1
            first = start + embeddings_done
        else:
            base = positions[-1, start] + 1
            first = start + 1 + embeddings_done
        end = first + mm_pos.shape[1]
        positions[:, first:end] = mm_pos[0:3] + base
        if mm_pos.shape[0] == 5:
            resume = mm_pos[0:3].max() + base + 1
        else:
            resume = mm_pos[3, 0] + base
        text_after = torch.cumsum((~media[end:]).long(), dim=0)
        positions[:, end:length] = text_after + resume - 1
        computed += mm_pos.shape[1]
    return positions, _delta(positions, length)  # type: ignore[return-value]


def _media_start(
    media: torch.Tensor,
    vision_starts: torch.Tensor,
    computed: int,
    media_done: int,
    has_video: bool,
    timestamps: int,
) -> tuple[int, int]:
    """The vision-start index of the media being placed, and how many of its embeddings earlier
    chunks already placed (0 when it starts in this chunk)."""
    passed = vision_starts[vision_starts < computed]
    if len(passed):
        last = int(passed[-1])
        before_last = int(torch.count_nonzero(media[:last]))
        inside = media_done > before_last
        # Qwen3-VL: past the vision start but still within the timestamp tokens is inside too.
        if not inside and has_video and last < computed <= last + timestamps + 1:
            inside = True
        if inside:
            return last, media_done - before_last
    upcoming = vision_starts[vision_starts >= computed]
    return int(upcoming[0]), 0


__all__ = [
    "compute_mrope_for_media",
    "compute_retained_tokens_count",
    "compute_retention_mask",
    "recompute_mrope_positions",
]
