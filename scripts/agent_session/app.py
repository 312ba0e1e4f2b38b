"""A small web server: the agent session of docs/GUIDE.md starts it as a
session (tests/suite/docs/session.rs replays that session, on the first
free port from 8000 up written in place of 8000)."""

import http.server
import sys

PORT = 8000

server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), http.server.SimpleHTTPRequestHandler)
# One write, as a real server logs its ready line (print() under
# `python3 -u` writes the text and its newline apart).
sys.stdout.write(f"Serving HTTP on 127.0.0.1 port {PORT} (http://127.0.0.1:{PORT}/) ...\n")
server.serve_forever()
