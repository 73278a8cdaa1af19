"""Load on ``polyrl serve``: parallel clients (how many answered, refused with 503, or reset) and
a small request's latency while a huge-``n`` request runs. Starts the server on the tiny model.

    python bench/serve_load.py [--clients 50] [--rounds 3] [--huge-n 64] [--huge-requests 3]
                               [--server-args "..."]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time

import httpx


def start(model: str, extra: list[str]) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "polyrl.cli", "serve", "--backend", "torch", "--model", model, "--port", "0",
           "--threads", "1", "--served-model-name", "tiny", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if "listening on" in line:
            return proc, line.split("listening on", 1)[1].split()[0].removesuffix("/v1")
    raise SystemExit(f"server did not start (exit {proc.wait()})")


def parallel(url: str, clients: int, rounds: int) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    lock, barrier = threading.Lock(), threading.Barrier(clients)

    def client(i: int) -> None:
        barrier.wait()
        for r in range(rounds):
            with httpx.Client(timeout=120, trust_env=False) as c:
                try:
                    status = str(c.post(f"{url}/v1/completions", json={"prompt": f"{i}+{r}", "max_tokens": 8}
                                        ).status_code)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
            with lock:
                counts[status] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dict(counts)


def starvation(url: str, huge_n: int, huge_requests: int) -> dict[str, float]:
    c = httpx.Client(timeout=600, trust_env=False)
    alone = time.monotonic()
    c.post(f"{url}/v1/completions", json={"prompt": "1 + 1 =", "max_tokens": 4, "temperature": 0})
    alone = time.monotonic() - alone
    t_first = time.monotonic()
    ends: list[float] = []

    def huge() -> None:
        httpx.post(f"{url}/v1/completions", json={"prompt": "Count:", "n": huge_n, "max_tokens": 64},
                   timeout=600, trust_env=False)
        ends.append(time.monotonic())

    threads = [threading.Thread(target=huge) for _ in range(huge_requests)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    time.sleep(0.2)
    t0 = time.monotonic()
    c.post(f"{url}/v1/completions", json={"prompt": "1 + 1 =", "max_tokens": 4, "temperature": 0})
    small = time.monotonic() - t0
    for thread in threads:
        thread.join()
    return {"small_alone_s": round(alone, 3), "small_behind_huge_s": round(small, 3),
            "all_huge_done_s": round(max(ends) - t_first, 3)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--huge-n", type=int, default=64)
    p.add_argument("--huge-requests", type=int, default=3, help="huge requests queued before the small one")
    p.add_argument("--server-args", default="")
    args = p.parse_args()
    from polyrl.testing.tiny_model import build_tiny_llama

    model = build_tiny_llama(os.path.join(tempfile.mkdtemp(), "tiny"))
    proc, url = start(model, shlex.split(args.server_args))
    try:
        print(json.dumps({"parallel": parallel(url, args.clients, args.rounds),
                          "starvation": starvation(url, args.huge_n, args.huge_requests)}))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
