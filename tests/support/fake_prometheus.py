"""A stand-in for Prometheus's query API on 127.0.0.1, for the unit tests of the team GPU-use report (_gpu_use, the
team_gpu_use module, gpu-job usage --team). Test tooling, never part of a role."""

import contextlib
import http.server
import json
import threading
import urllib.parse


def vector(result):
    """The body of a successful instant query answering ``result`` (a list of {metric, value})."""
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@contextlib.contextmanager
def serving(answer):
    """Serve ``answer(path, params) -> (status, body)`` (params: the parsed query string) on a free loopback port;
    yields the URL."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):  # noqa: N802 (http.server's name)
            parts = urllib.parse.urlparse(self.path)
            status, body = answer(parts.path, urllib.parse.parse_qs(parts.query))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
