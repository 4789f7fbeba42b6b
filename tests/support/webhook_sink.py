"""A test receiver for Alertmanager's webhook: every POST body, one JSON document per line, appended to the file
given as the second argument; listens on 127.0.0.1 at the port given as the first. Test tooling, never part of a
role (molecule/cluster-shared/prepare.yml runs it on the head as gpucluster-webhook-sink.service)."""

import http.server
import json
import sys
import time


class Sink(http.server.BaseHTTPRequestHandler):
    path_out = None

    def log_message(self, *args):  # quiet: the file is the log
        pass

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            document = json.loads(body)
        except ValueError:
            document = {"unreadable": body.decode("utf-8", "replace")}
        with open(self.path_out, "a") as handle:
            handle.write(json.dumps({"received": time.time(), "path": self.path, "body": document}) + "\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main():
    Sink.path_out = sys.argv[2]
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()


if __name__ == "__main__":
    main()
