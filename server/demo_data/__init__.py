"""Built-in demo dataset (package so that setuptools ships the .ttl files)."""
