"""Serving: the HTTP server and its event loop, request parsing, --web.config.file (TLS, basic auth,
headers), login throttling and the response bodies. A scrape reads the last snapshot; it never touches a GPU."""
