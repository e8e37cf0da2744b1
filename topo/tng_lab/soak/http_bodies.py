"""HTTP through `tng proxy` with every body verified: a server that answers `/SEED/SIZE` with SIZE bytes generated
from SEED, and a fetcher that asks for random bodies and checks each one's SHA-256 against its own copy.

The fetcher never trusts the server for the expected digest: it generates the body itself, so a byte lost,
duplicated, reordered or changed anywhere on the way (proxy, tng, links, switch) shows as a mismatch. It writes one
JSON line per request to its stdout: `{"t", "seed", "size", "received", "ok", "error"}` (`ok` null when the request
failed before a complete body arrived: an interrupted transfer, not a wrong one).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import random
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 65536
REQUEST_TIMEOUT_S = 60.0
SIZES = (1_000, 20_000, 200_000, 1_000_000)  # short pages to large objects
PAUSE_S = 0.2


def body_chunks(seed: int, size: int):
    """The body of `/seed/size`, in chunks: a keyed byte stream (SHAKE-128 of the seed), cheap and reproducible."""
    stream = hashlib.shake_128(f"tng-soak-{seed}".encode()).digest(size)
    for start in range(0, size, CHUNK):
        yield stream[start : start + CHUNK]


def expected_digest(seed: int, size: int) -> str:
    digest = hashlib.sha256()
    for chunk in body_chunks(seed, size):
        digest.update(chunk)
    return digest.hexdigest()


class _Bodies(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        try:
            seed_text, size_text = self.path.strip("/").split("/")
            seed, size = int(seed_text), int(size_text)
            if not 0 < size <= 64_000_000:
                raise ValueError(size)
        except ValueError:
            self.send_error(400, "expected /SEED/SIZE with 0 < SIZE <= 64000000")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        for chunk in body_chunks(seed, size):
            self.wfile.write(chunk)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request would only fill the log


def serve(host: str, port: int) -> int:
    server = ThreadingHTTPServer((host, port), _Bodies)
    server.daemon_threads = True
    print(f"http_bodies: serving on {host}:{port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


def fetch_one(host: str, port: int, seed: int, size: int) -> dict[str, object]:
    record: dict[str, object] = {"t": time.time(), "seed": seed, "size": size, "received": 0, "ok": None}
    connection = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
    try:
        connection.request("GET", f"/{seed}/{size}")
        response = connection.getresponse()
        if response.status != 200:
            record["error"] = f"HTTP {response.status}"
            return record
        digest = hashlib.sha256()
        received = 0
        while chunk := response.read(CHUNK):
            digest.update(chunk)
            received += len(chunk)
        record["received"] = received
        # The connection closed cleanly, so the body must be whole and right: a relay that cannot complete a body
        # resets its client's connection (an OSError above, an interrupted fetch); a clean close after part of it
        # would pass the cut-off body on as complete, and is flagged like a wrong byte.
        record["ok"] = received == size and digest.hexdigest() == expected_digest(seed, size)
        if not record["ok"]:
            record["error"] = f"body of {received} bytes does not match the {size} bytes sent (SHA-256)"
    except (OSError, http.client.HTTPException) as err:
        record["error"] = f"{type(err).__name__}: {err}"
    finally:
        connection.close()
        record["end"] = time.time()
    return record


def fetch(host: str, port: int, seed: int) -> int:
    rng = random.Random(seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    number = 0
    while True:
        number += 1
        record = fetch_one(host, port, seed * 1_000_000 + number, rng.choice(SIZES))
        print(json.dumps(record), flush=True)
        time.sleep(PAUSE_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.soak.http_bodies", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("serve", help="answer /SEED/SIZE")
    server.add_argument("--listen", required=True, help="HOST:PORT")
    client = commands.add_parser("fetch", help="fetch random bodies and verify them until terminated")
    client.add_argument("--connect", required=True, help="HOST:PORT (the local `tng proxy`)")
    client.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    host, _, port = (args.listen if args.command == "serve" else args.connect).rpartition(":")
    if args.command == "serve":
        return serve(host, int(port))
    return fetch(host, int(port), args.seed)


if __name__ == "__main__":
    sys.exit(main())
