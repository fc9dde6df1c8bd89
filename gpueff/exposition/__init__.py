"""Prometheus text from a Snapshot: the format itself (text) and what each catalogue row renders (render)."""
