"""VidCom2 (Liu et al., EMNLP 2025, arXiv 2505.14454): prune the most redundant video tokens.

A token is redundant when it resembles both the whole video's average token and its own frame's
(a Gaussian kernel summed over several bandwidths, on the half of the channels that vary least,
after L2 normalization). Each frame keeps its least redundant tokens; frames unlike the rest of
the video get a larger share of the budget (a sharp softmax over how unlike they are). The kept
count is then made exact by score. ``q`` is the fraction pruned; each frame keeps at least one
token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Kernel bandwidths 1/8 .. 2, the share of channels scored, and the softmax temperature that
# turns frame distinctiveness into budget shares.
_BANDWIDTHS: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0, 2.0)
_SCORED_CHANNEL_SHARE = 0.5
_FRAME_SHARE_TEMPERATURE = 0.01


def compute_retained_tokens_count(tokens_per_frame: int, num_frames: int, q: float) -> int:
    """How many of a video's tokens survive: ``(1 - q)`` of them, at least one per frame."""
    total = tokens_per_frame * num_frames
    return max(num_frames, min(int(total * (1.0 - q)), total))


def _similarity(tokens: torch.Tensor, centre: torch.Tensor) -> torch.Tensor:
    """(T, N, C) tokens against a centre that broadcasts to them -> (T, N) kernel sums."""
    squared = ((tokens - centre) ** 2).sum(dim=-1)
    kernels = torch.zeros_like(squared)
    for width in _BANDWIDTHS:
        kernels = kernels + torch.exp(-squared / (2.0 * width))
    return kernels


def compute_retention_mask(
    video_embeds: torch.Tensor,
    video_size_thw: torch.LongTensor | tuple[int, int, int],
    spatial_merge_size: int,
    q: float,
) -> torch.Tensor:
    """Which tokens of one video to keep: a flat bool mask over its ``T * H * W / merge**2``
    tokens, with exactly :func:`compute_retained_tokens_count` of them True.

    ``video_embeds``: ``(T * H * W / merge**2, hidden)`` encoder outputs; ``video_size_thw``: the
    (T, H, W) patch grid before merging.
    """
    frames, height, width = (int(n) for n in video_size_thw)
    per_frame = (height // spatial_merge_size) * (width // spatial_merge_size)
    total = frames * per_frame
    device = video_embeds.device
    if total == 0:
        return torch.ones(0, dtype=torch.bool, device=device)
    target = min(compute_retained_tokens_count(per_frame, frames, q), total)

    channels = max(1, int(video_embeds.size(-1) * _SCORED_CHANNEL_SHARE))
    quiet = torch.topk(video_embeds.var(dim=0, unbiased=False), k=channels, largest=False).indices
    tokens = F.normalize(
        video_embeds.index_select(-1, quiet).view(frames, per_frame, channels), dim=-1
    )
    to_video = _similarity(tokens, tokens.mean(dim=(0, 1), keepdim=True))
    to_frame = _similarity(tokens, tokens.mean(dim=1, keepdim=True))
    redundancy = to_video + to_frame  # (T, per_frame)

    distinct = -to_video.mean(dim=-1)
    shares = F.softmax((distinct - distinct.max()) / _FRAME_SHARE_TEMPERATURE, dim=0)
    scale = ((1.0 - q) * (1.0 + shares - shares.mean())).clamp(max=1.0)
    budgets = (scale * per_frame).round().long().clamp(min=1, max=per_frame).tolist()

    mask = torch.zeros(frames, per_frame, dtype=torch.bool, device=device)
    for frame, budget in enumerate(budgets):
        kept = torch.topk(redundancy[frame], k=budget, largest=False, sorted=False).indices
        mask[frame].scatter_(0, kept, True)

    flat, scores = mask.view(-1), redundancy.view(-1)
    surplus = sum(budgets) - target
    if surplus > 0:  # rounding kept too many: drop the most redundant of those kept
        kept_at = flat.nonzero(as_tuple=False).squeeze(-1)
        worst = torch.topk(scores[kept_at], k=surplus, largest=True, sorted=False).indices
        flat[kept_at[worst]] = False
    elif surplus < 0:  # too few: add the least redundant of those dropped
        dropped_at = (~flat).nonzero(as_tuple=False).squeeze(-1)
        if dropped_at.numel():
            count = min(-surplus, dropped_at.numel())
            best = torch.topk(scores[dropped_at], k=count, largest=False, sorted=False).indices
            flat[dropped_at[best]] = True
    return flat


__all__ = ["compute_retained_tokens_count", "compute_retention_mask"]
