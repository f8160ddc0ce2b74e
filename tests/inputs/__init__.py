"""Data inputs (``--data``): paths and URLs, their digests, downloads, redirects and
credentials."""
