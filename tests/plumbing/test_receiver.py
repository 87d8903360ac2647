"""streaming/receiver.WebhookReceiver over real sockets: what `answer` is given and what the sender gets
back; a sender that dies mid-request and a body over the limit."""

from __future__ import annotations

import http.client
import socket
import threading

from streaming.plumbing.receiver import MAX_BODY, Reply, Request, WebhookReceiver
from streaming.workshop.polling import poll


class Recorder:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        with self.lock:
            self.requests.append(request)
        return Reply(202, b'{"ok":true}', {"Content-Type": "application/json", "X-Seen": str(len(request.body))})


def _post(port: int, path: str, body: bytes, headers: dict[str, str]) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, body=body, headers=headers)
    return conn.getresponse()


def test_answer_gets_the_request_and_the_sender_its_reply():
    recorder = Recorder()
    with WebhookReceiver(recorder) as receiver:
        response = _post(receiver.port, "/hook?x=1", b'{"a": 1}', {"X-Fleetwatch-Signature": "t=1,v1=ab"})
        assert (response.status, response.read()) == (202, b'{"ok":true}')
        assert response.getheader("X-Seen") == "8" and response.getheader("Content-Type") == "application/json"
    (request,) = recorder.requests
    assert (request.path, request.body, request.length) == ("/hook?x=1", b'{"a": 1}', 8)
    assert request.headers["x-fleetwatch-signature"] == "t=1,v1=ab"  # names in lower case
    assert receiver.url("/alerts") == f"http://127.0.0.1:{receiver.port}/alerts"


def test_a_sender_dying_mid_request_reaches_no_answer():
    recorder = Recorder()
    with WebhookReceiver(recorder) as receiver:
        with socket.create_connection(("127.0.0.1", receiver.port)) as sock:
            sock.sendall(b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        response = _post(receiver.port, "/after", b"{}", {})  # served after the broken one was read
        assert response.status == 202
        poll(lambda: recorder.requests, 5, "the second request", interval_s=0.02)
    assert [r.path for r in recorder.requests] == ["/after"]


def test_a_body_over_the_limit_is_not_read_and_answer_sees_its_length():
    recorder = Recorder()
    with WebhookReceiver(recorder) as receiver, socket.create_connection(("127.0.0.1", receiver.port)) as sock:
        sock.sendall(f"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode())
        assert sock.recv(64).startswith(b"HTTP/1.0 202")
    (request,) = recorder.requests
    assert (request.body, request.length) == (b"", MAX_BODY + 1)
