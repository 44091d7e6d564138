"""The serving surface: a GPU-less render server and the ``mediaref`` command.

``mediaref serve`` answers vLLM 0.33's render routes (``POST /v1/chat/completions/render``,
``POST /v1/completions/render``: a request in, prompt token ids and the processed multimodal
payload out, no inference), ``GET /health`` and ``GET /metrics``; ``mediaref render`` renders one
request offline. One concept a module:

- :mod:`.options`: the server's settings and their multi-tenant defaults;
- :mod:`.protocol` (with :mod:`._fields`, :mod:`._chat_shapes`, :mod:`.sampling`): the request
  shapes, validated as vLLM's models validate them;
- :mod:`.responses`, :mod:`.features`: the response shape (``GenerateRequest``), with
  :mod:`.encoded_cache` (a repeated item's tensors are not encoded again) and :mod:`.json_body`
  (writing megabytes of base64 without re-scanning them);
- :mod:`.errors`: every failure's status and OpenAI-shaped body; :mod:`.logs`: the access log,
  refused requests (rate-limited) and the level;
- the front door, what no client may exceed: :mod:`.connections` (connections counted),
  :mod:`.request_body` (bodies received whole within their timeouts, JSON within its bounds),
  :mod:`.client_limits` (each client's share of slots, body bytes and connections),
  :mod:`.fair_pool` (blocking work in the clients' turns);
- :mod:`.service`: rendering one request (both commands), with :mod:`.prompt_checks` (over-long
  prompts refused before the model's worker, placeholder tokens that stand for no item refused);
- :mod:`.metrics`: the Prometheus metrics;
- :mod:`.app`, :mod:`.server`: the aiohttp application, and running it (SIGTERM drains);
- :mod:`.cli`, :mod:`.render_once`: the command line.

``docs/serving.md`` is the user's guide.
"""

from __future__ import annotations

from mediaref.serve.options import DEFAULT_MODEL, ServeOptions

__all__ = ["DEFAULT_MODEL", "ServeOptions"]
