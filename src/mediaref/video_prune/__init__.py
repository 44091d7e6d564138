"""``vllm.multimodal.video_prune``: pruning redundant video tokens after the vision encoder.

- :mod:`~mediaref.video_prune.evs`: EVS, keeping the tokens that changed most since the
  previous frame (every token of the first frame is kept), and the M-RoPE positions of what
  remains.
- :mod:`~mediaref.video_prune.vidcom2`: VidCom2, keeping per frame the tokens least like the
  video's and their frame's average, with a larger share for distinctive frames.

Both keep ``compute_retained_tokens_count(tokens_per_frame, num_frames, q)`` tokens of a video,
so the prompt's placeholders can be sized before the encoder runs. torch only.
"""

from __future__ import annotations

__all__: list[str] = []
