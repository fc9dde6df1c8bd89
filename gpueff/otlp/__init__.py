"""Pushing the catalogue's series over OTLP (the optional ``otlp`` extra): docs/otlp.md.

Here only what the command line and the daemon's start need without loading the pusher
(``push.py``, imported only where ``--otlp.endpoint`` asks for it)."""

PROTOCOLS = ("grpc", "http/protobuf")


class OtlpUnavailable(Exception):
    """The otlp extra is not installed, or the endpoint cannot be used; phrased for the user."""
