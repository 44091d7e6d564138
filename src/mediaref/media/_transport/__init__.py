"""The connector's transport pieces, one concept per module.

``url_policy``  which http(s) URLs may be fetched: scheme, parser agreement, domains, IP literals
``addresses``   which resolved addresses may be connected to, and the resolver that enforces it
``data_url``    RFC 2397 ``data:`` URLs (base64 only)
``local_file``  ``file:`` URLs confined to the allowed local media path
``http_client`` the shared aiohttp sessions, one pair per event loop (they never decompress)
``connection_slots`` the total connection limit (and an optional per-origin one), and which waits
                 a timeout is charged
``request_scope`` one request's fetch deadline and connection bound, shared by its downloads
                 (public as ``connector.MediaRequestFetchScope``)
``http_download`` one capped, streamed, retried download with per-hop redirect checks
``http_body``   one response body under the cap, gzip/deflate decoded with a bounded output
``disk_cache``  the on-disk download cache shared by processes
``budget``      the per-request download budget (public as ``connector.MediaRequestDownloadBudget``)
``errors``      the one table that maps lower-level exceptions into ``mediaref.exceptions``
``loop_thread`` the private event loop that the synchronous API runs downloads on
``registry``    the connector registry behind ``MEDIA_CONNECTOR_REGISTRY``

Nothing here is public but the budget and the fetch scope; :mod:`mediaref.media.connector`
composes it.
"""
