"""Pushing the catalogue's series over OTLP (the optional ``otlp`` extra): docs/otlp.md."""
