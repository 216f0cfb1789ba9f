"""Input into the store: :mod:`engine.io.ingest` is the one write path (parse -> intern -> apply)."""
