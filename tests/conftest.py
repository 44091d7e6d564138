"""Shared test configuration. Loading this file puts ``tests/`` on ``sys.path`` (pytest's prepend
import mode), so test packages in subdirectories such as ``tests/security/`` import the shared
helpers (``_http_server``, ``_image_samples``, ...) the same way top-level test modules do."""
