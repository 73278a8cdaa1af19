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
