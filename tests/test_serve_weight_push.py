"""``POST /polyrl/weights``: only with the shared secret, and only weights that fit the model.
Every refusal leaves the served weights as they were (greedy generation is unchanged); a good
push with the token does change them, which is what makes that equality mean something."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from serve_util import start_server

pytestmark = pytest.mark.faults

TOKEN = "push-secret-" + "c0ffee" * 6
HEADER = "X-Polyrl-Weight-Token"


@pytest.fixture(scope="module")
def token_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("secret") / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


@pytest.fixture(scope="module")
def server(tiny_model_dir, token_file):
    started = start_server(tiny_model_dir, "--allow-weight-push", "--weight-push-token-file", token_file)
    yield started
    started.stop(graceful=False)  # a teardown (serve_util.ServerProcess.stop)


@pytest.fixture(scope="module")
def original(tiny_model_dir) -> dict[str, np.ndarray]:
    from pathlib import Path

    weights: dict[str, np.ndarray] = {}
    for f in sorted(Path(tiny_model_dir).glob("*.safetensors")):
        weights.update(load_file(str(f)))
    return {k: v.astype(np.float32) for k, v in weights.items()}


def greedy(server) -> list[list[int]]:
    r = server.post("/v1/completions", json={"prompt": ["The cat", "1 2 3"], "max_tokens": 8, "temperature": 0,
                                             "return_token_ids": True})
    assert r.status_code == 200, r.text
    return [c["token_ids"] for c in r.json()["choices"]]


def push(server, path, token: str | None = TOKEN):
    headers = {HEADER: token} if token is not None else {}
    return server.post("/polyrl/weights", json={"path": str(path)}, headers=headers)


def test_pushes_without_the_token_or_with_bad_payloads_change_nothing(server, original, tmp_path):
    before, version = greedy(server), server.stats()["weight_version"]
    rng = np.random.default_rng(0)
    changed = {k: v + rng.normal(0, 0.5, v.shape).astype(np.float32) for k, v in original.items()}
    save_file(changed, str(tmp_path / "changed.safetensors"))

    assert push(server, tmp_path / "changed.safetensors", token=None).status_code == 401
    assert push(server, tmp_path / "changed.safetensors", token="wrong").status_code == 403
    assert push(server, tmp_path / "changed.safetensors", token=TOKEN[:-1]).status_code == 403

    name = next(iter(original))
    bad: dict[str, tuple[dict[str, np.ndarray] | bytes, int, str]] = {
        "renamed": ({**{k: v for k, v in changed.items() if k != name}, name + ".x": changed[name]}, 422,
                    "unknown"),
        "missing": ({k: v for k, v in changed.items() if k != name}, 422, "missing"),
        "shape": ({**changed, name: changed[name][..., :-1].copy()}, 422, "shape"),
        "dtype": ({**changed, name: changed[name].astype(np.float16)}, 422, "F16"),
        "nan": ({**changed, name: np.where(changed[name] > 0, np.nan, changed[name]).astype(np.float32)}, 422,
                "NaN"),
        "garbage": (b"\x10\x00\x00\x00\x00\x00\x00\x00not a header at all", 400, "not a readable"),
    }
    for label, (payload, status, words) in bad.items():
        path = tmp_path / f"{label}.safetensors"
        if isinstance(payload, bytes):
            path.write_bytes(payload)
        else:
            save_file(payload, str(path))
        r = push(server, path)
        assert r.status_code == status, (label, r.text)
        assert words in r.json()["error"]["message"], (label, r.json())
    (tmp_path / "empty-dir").mkdir()
    for path in (tmp_path / "nowhere.safetensors", tmp_path / "empty-dir", tmp_path / "renamed.safetensors.txt"):
        assert push(server, path).status_code == 400, path
    assert server.post("/polyrl/weights", json={}, headers={HEADER: TOKEN}).status_code == 400
    assert server.post("/polyrl/weights", content=b"{", headers={HEADER: TOKEN}).status_code == 400

    assert greedy(server) == before and server.stats()["weight_version"] == version

    # the same file with the token is loaded, and generation changes; pushing the original restores it
    assert push(server, tmp_path / "changed.safetensors").status_code == 200
    assert greedy(server) != before
    save_file(original, str(tmp_path / "original.safetensors"))
    assert push(server, tmp_path / "original.safetensors").status_code == 200
    assert greedy(server) == before
    assert server.stats()["weight_version"] == version + 2


def test_insecure_push_works_without_a_token_on_loopback_only_when_asked(tiny_model_dir, original, tmp_path):
    save_file(original, str(tmp_path / "original.safetensors"))
    server = start_server(tiny_model_dir, "--allow-weight-push", "--insecure-weight-push")
    try:
        assert push(server, tmp_path / "original.safetensors", token=None).status_code == 200
    finally:
        server.stop(graceful=False)


def test_every_reply_names_the_weights_that_generated_it_while_pushes_race_with_requests(server, original,
                                                                                           tmp_path):
    """8 clients generate while weights A and B are pushed in turn: every reply's weights_version is
    the push whose weights generated all of its completions (the greedy ids of A or of B)."""
    import threading
    import time

    rng = np.random.default_rng(1)
    save_file(original, str(tmp_path / "A.safetensors"))
    save_file({k: v + rng.normal(0, 0.5, v.shape).astype(np.float32) for k, v in original.items()},
              str(tmp_path / "B.safetensors"))
    greedy_of, which = {}, {}
    for name in "AB":
        answer = push(server, tmp_path / f"{name}.safetensors").json()
        r = server.post("/v1/completions", json={"prompt": [[5, 6, 7], [9]], "max_tokens": 6, "temperature": 0,
                                                 "n": 2, "return_token_ids": True}).json()
        assert (r["weights_version"], r["weights_id"]) == (answer["version"], answer["weights_id"])
        assert answer["weights_id"] == server.stats()["weights_id"]
        greedy_of[name], which[answer["version"]] = [c["token_ids"] for c in r["choices"]], name
    assert greedy_of["A"] != greedy_of["B"]
    replies: list[tuple[int, list[list[int]]]] = []
    stop = threading.Event()

    def client() -> None:
        import httpx

        with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as c:
            while not stop.is_set():
                r = c.post("/v1/completions", json={"prompt": [[5, 6, 7], [9]], "max_tokens": 6, "temperature": 0,
                                                    "n": 2, "return_token_ids": True}).json()
                replies.append((r["weights_version"], [ch["token_ids"] for ch in r["choices"]]))

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for i in range(6):
        name = "AB"[i % 2]
        version = push(server, tmp_path / f"{name}.safetensors").json()["version"]
        which[version] = name
        # the next push once a client was answered from this one: pushed back to back, the six
        # could all land before a starved client's first reply (every reply then on one version)
        deadline = time.monotonic() + 60
        while all(v != version for v, _ in list(replies)) and time.monotonic() < deadline:
            time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join()
    assert len({version for version, _ in replies}) >= 2 and replies
    assert all(ids == greedy_of[which[version]] for version, ids in replies)


def test_a_tensor_in_two_files_or_an_unknown_field_is_refused_and_nothing_loads(server, original, tmp_path):
    before, version = greedy(server), server.stats()["weight_version"]
    names = sorted(original)
    changed = {k: v + 1.0 for k, v in original.items()}
    (tmp_path / "split").mkdir()
    save_file({k: changed[k] for k in names[:3]}, str(tmp_path / "split" / "a.safetensors"))
    save_file({k: changed[k] for k in names[2:]}, str(tmp_path / "split" / "b.safetensors"))
    r = push(server, tmp_path / "split")
    assert r.status_code == 422 and f"{names[2]} is in both" in r.json()["error"]["message"], r.text
    save_file(changed, str(tmp_path / "changed.safetensors"))
    r = server.post("/polyrl/weights", json={"path": str(tmp_path / "changed.safetensors"), "dtype": "bfloat16"},
                    headers={HEADER: TOKEN})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dtype", r.text
    assert greedy(server) == before and server.stats()["weight_version"] == version


def test_a_fifo_named_like_weights_is_refused_without_blocking_the_server(server, tmp_path):
    """A FIFO named *.safetensors was opened by safetensors holding the server's lock: every
    request, /health included, waited until something wrote to the FIFO."""
    import os

    folder = tmp_path / "weights"
    folder.mkdir()
    os.mkfifo(folder / "model.safetensors")
    # seen, not timed (was < 10 s elapsed): nothing ever writes to the FIFO, so an open of it would
    # block for good and the push would get no answer at all (the client's 60 s timeout)
    answer = push(server, str(folder))
    assert answer.status_code == 400 and "is not a regular file" in answer.json()["error"]["message"]
    assert server.get("/health").status_code == 200


class _NoEngine:
    """A generate engine that is never asked (a unit-test fake of the core's Engine): the push below
    is refused before anything would reach it."""

    def generate(self, prompts, sampling):
        raise AssertionError("not asked")

    def import_weights(self, weights):
        raise AssertionError("not asked")


@pytest.mark.faults
def test_a_push_whose_client_goes_away_mid_body_is_told_so_not_a_timeout():
    """A weight push interrupted mid-body (the trainer killed, its connection closed) was answered 408
    "the body was not received within 60 s": the server had waited no time at all, and nothing was
    loaded. It is a 400 saying the connection ended mid-body and that nothing was done."""
    import json
    import socket
    import threading

    from polyrl.serve import PolyrlServer
    from polyrl.serving.weight_push import TOKEN_HEADER

    server = PolyrlServer(("127.0.0.1", 0), _NoEngine(), model_name="m", allow_weight_push=True,
                          weight_push_token="secret")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with socket.create_connection(server.server_address[:2], timeout=60) as sock:
            sock.sendall(f"POST /polyrl/weights HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: secret\r\n"
                         "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"path\": \"/tm".encode())
            sock.shutdown(socket.SHUT_WR)  # gone mid-body; still reading, so the answer can be seen
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), reply
        message = json.loads(body)["error"]["message"]
        assert message.startswith("the connection ended after 13 of the body's 100 bytes"), message
        assert "nothing was loaded" in message and "not received within" not in message
        assert server.stats.weight_version == 0
    finally:
        server.shutdown()
        server.server_close()


def test_a_body_stalling_past_the_read_timeout_is_a_408_not_a_client_reset():
    """The per-recv timeout equals --read-timeout-s and the deadline watcher ticks every 0.25 s, so
    a body stalling after its headers usually timed out in recv first: that was taken for a reset and
    answered 400 "the client closed or reset it mid-body", blaming the client for the server's wait.
    A watcher that never ticks here makes the recv timeout the one that ends the wait."""
    import json
    import socket
    import threading

    from polyrl.serve import PolyrlServer
    from polyrl.serving.connections import Deadlines
    from polyrl.serving.limits import Limits

    server = PolyrlServer(("127.0.0.1", 0), _NoEngine(), model_name="m", limits=Limits(read_timeout_s=0.3))
    server.deadlines = Deadlines(tick_s=3600)  # the watcher's tick not yet come: the recv times out first
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with socket.create_connection(server.server_address[:2], timeout=60) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 10\r\n\r\n{\"")  # 2 of 10 bytes, then nothing more
            reply = b""
            while chunk := sock.recv(65536):  # the server answers, then closes
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), reply
        message = json.loads(body)["error"]["message"]
        assert message.startswith("the body was not received within 0.3 s (2 of 10 bytes)"), message
    finally:
        server.shutdown()
        server.server_close()


def test_the_deadline_watcher_tells_a_connection_it_cut_from_one_the_client_closed():
    """What lets the body's reader say 408 (the server's deadline) or 400 (the client went away)."""
    import socket
    import time

    from polyrl.serving.connections import Deadlines

    deadlines = Deadlines(tick_s=0.01)
    left, right = socket.socketpair()
    other, _peer = socket.socketpair()
    try:
        deadlines.set(left, 0)
        deadlines.set(other, 3600)
        give_up = time.monotonic() + 60  # a bound for a loaded machine, not a timing assertion
        while not deadlines.cut(left) and time.monotonic() < give_up:
            time.sleep(0.01)
        assert deadlines.cut(left) and not deadlines.cut(other)
        assert left.recv(1) == b""  # shut down: its reader sees end-of-file
        deadlines.clear(left)
        assert not deadlines.cut(left)
    finally:
        for s in (left, right, other, _peer):
            s.close()
