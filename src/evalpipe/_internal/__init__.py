"""Implementation details; not part of the public API."""
