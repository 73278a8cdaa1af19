"""Start ``polyrl serve`` in a subprocess on 127.0.0.1 (a free port) and talk to it over HTTP."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import httpx

SERVED_NAME = "tiny"


class ServerProcess:
    def __init__(self, proc: subprocess.Popen, url: str, log_path: str) -> None:
        self.proc, self.url, self.log_path = proc, url, log_path
        self.base_url = url + "/v1"
        self.client = httpx.Client(base_url=url, timeout=60, trust_env=False)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.get(path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.post(path, **kw)

    def stats(self) -> dict[str, Any]:
        return self.get("/polyrl/stats").json()

    def wait_idle(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.stats()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.05)

    def reset(self, **faults: Any) -> None:
        """Wait for requests still running (e.g. abandoned slow ones), reset counters, set faults."""
        self.wait_idle()
        base = {"delay_s": 0.0, "delay_first": 0, "garbage": False, "fail_503_first": 0, "die_after": None}
        assert self.post("/polyrl/faults", json={**base, **faults}).status_code == 200
        assert self.post("/polyrl/stats/reset").status_code == 200

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self, graceful: bool = True) -> None:
        """SIGTERM (``graceful``) and wait up to 10 s, else SIGKILL. A fixture's teardown, which checks
        nothing about the stop, passes ``graceful=False``: an idle server's drain returns at once, but
        its interpreter then spends ~3 s (more on loaded cores) tearing torch down before it exits.
        The graceful stop has its own tests (test_serve_hostile's SIGTERM while generating)."""
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate() if graceful else self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def stop_all(servers: list[ServerProcess], graceful: bool = True) -> None:
    """Stop ``servers`` together: each is signalled before any is waited for, so servers slow to
    leave (up to ``stop``'s 10 s each) wait side by side rather than one after another."""
    for server in servers:
        if server.proc.poll() is None:
            server.proc.terminate() if graceful else server.proc.kill()
    for server in servers:
        server.stop(graceful)


def launch(model_dir: str, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    fd, log_path = tempfile.mkstemp(prefix="polyrl-serve-", suffix=".log")
    cmd = [sys.executable, "-m", "polyrl.cli", "serve", "--backend", "torch", "--model", model_dir,
           "--served-model-name", SERVED_NAME, "--port", "0", "--threads", "1", *args]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=fd, text=True, env=full_env)
    os.close(fd)
    return proc, log_path


def wait_ready(proc: subprocess.Popen, log_path: str, timeout: float = 120.0) -> ServerProcess:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if "listening on" in line:
            url = line.split("listening on", 1)[1].split()[0].removesuffix("/v1")
            return ServerProcess(proc, url, log_path)
    proc.kill()
    log = open(log_path, errors="replace").read()[-3000:]
    raise RuntimeError(f"polyrl serve did not start (exit {proc.poll()}):\n{log}")


def start_server(model_dir: str, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
    proc, log_path = launch(model_dir, *args, env=env)
    return wait_ready(proc, log_path)


def raw_exchange(url: str, data: bytes, *, read_s: float = 10.0) -> tuple[bytes, float]:
    """Send raw bytes to the server and read until it closes or ``read_s`` passes: (reply, seconds).

    Why raw sockets: HTTP clients refuse to send a negative or non-numeric Content-Length, which
    is exactly what a hostile client sends.
    """
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    t0 = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port), timeout=read_s) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                    break
        except TimeoutError:
            pass
    return b"".join(chunks), time.monotonic() - t0


def _complete(reply: bytes) -> bool:
    head, _, body = reply.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return False


def status_of(reply: bytes) -> int:
    """The status code of a raw HTTP reply (0 when there was none)."""
    first = reply.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) >= 2 and first[1].isdigit() else 0
