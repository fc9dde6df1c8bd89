"""Serving the product over the HTTP server of gpueff/httpserver/: /metrics and the landing page,
the response bodies made from each snapshot, the live page and its history. A scrape reads the
last snapshot; it never touches a GPU."""
