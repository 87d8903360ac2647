"""A hostile HTTP receiver, run as its own process: `python tests/support/trickler.py PORT`.

`POST /body`: reads the request, answers `200` with its headers at once, then trickles the body
one byte a second and never ends it. `POST /headers`: trickles the status line and headers one
byte a second and never ends them. Prints `ready` once listening, then JSON lines: `open` when a request
has been read, `closed` when the client gives up (closes the connection): path, seconds from
request to close, bytes sent.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time

TRICKLE_S = 1.0
_PRINT = threading.Lock()


def _report(**fields) -> None:
    with _PRINT:  # one whole line at a time, whatever the threads
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


def _serve(conn: socket.socket) -> None:
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next((int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk
        path = lines[0].split(" ")[1]
        started = time.monotonic()
        _report(event="open", path=path)
        if path.startswith("/body"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
            endless = b"{" + b" " * 10_000_000
        else:
            endless = b"HTTP/1.1 200 OK\r\nX-Trickle: " + b"a" * 10_000_000
        sent = 0
        while True:
            # the client closing the connection makes it readable (EOF): seen at once, not at the next byte
            readable, _, _ = select.select([conn], [], [], TRICKLE_S)
            if readable:
                try:
                    if conn.recv(1) == b"":
                        break
                except OSError:
                    break
                continue
            try:
                conn.sendall(endless[sent:sent + 1])
            except OSError:
                break
            sent += 1
        _report(event="closed", path=path, seconds=round(time.monotonic() - started, 3), bytes=sent)


def main() -> None:
    server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
