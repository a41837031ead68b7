#!/usr/bin/python3
"""python_http - a small threaded HTTP server on loopback, for scripts/bench runtime-frames.

CPython's own http.server, a thread a connection (ThreadingHTTPServer), with
keep-alive (HTTP/1.1) and Nagle's algorithm off, answering every request with
the same small page. Without them each request would be a new connection and
each reply's body would wait for the client's delayed ACK (40 ms): a few
hundred requests a second, bounded by timers rather than by the server's work.

usage: python_http -p PORT
"""

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = ("<p>" + "offcpu " * 128 + "</p>\n").encode()


class Page(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass  # no line a request


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # wrk drops its connections mid-reply when its time is up


def main() -> None:
    parser = argparse.ArgumentParser(prog="python_http")
    parser.add_argument("-p", type=int, required=True, dest="port", help="the loopback port to listen on")
    port = parser.parse_args().port
    Server(("127.0.0.1", port), Page).serve_forever()


if __name__ == "__main__":
    main()
