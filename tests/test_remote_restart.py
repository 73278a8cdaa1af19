"""A `polyrl serve` that restarts during a run (an OOM kill, a node reboot) is back on its initial
weights: the remote backend pushes the weights it last pushed to it again, once, and trains only on
replies from them; a server another client pushed to still fails the attempt (``polyrl.remote_replies``
decides which is which)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from polyrl.engine import Engine
from polyrl.registry import Registry
from polyrl.remote_replies import ServerRestarted, StaleWeights, check_weights, restarted, weights_instance
from polyrl.types import EngineConfig, SamplingParams, TokenPrompt

from serve_util import start_server

pytestmark = pytest.mark.faults


# --- the rule ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("weights_id", "instance"), [
    ("3f9a0c1b2d4e-0", "3f9a0c1b2d4e"), ("3f9a0c1b2d4e-17", "3f9a0c1b2d4e"), ("a-b-2", "a-b"),
    (None, None), (7, None), ("", None), ("3f9a0c1b2d4e", None), ("-3", None), ("abc-", None), ("abc-x1", None),
])
def test_the_instance_is_the_process_part_of_a_polyrl_serve_weights_id(weights_id, instance):
    assert weights_instance(weights_id) == instance


def test_only_another_process_is_a_restart_the_same_one_on_other_weights_is_another_client():
    assert restarted("bbbb-0", "aaaa-3") and restarted("bbbb-5", "aaaa-3")
    assert not restarted("aaaa-4", "aaaa-3")  # another client pushed to the same process
    assert not restarted("aaaa-3", "aaaa-3")
    assert not restarted(None, "aaaa-3") and not restarted("vllm", "aaaa-3")  # not a polyrl serve id: no heal


def test_check_weights_tells_a_restart_from_another_clients_push():
    check_weights({"weights_id": "aaaa-3"}, "aaaa-3")
    check_weights({"weights_id": "anything"}, None)  # nothing pushed yet: nothing to compare
    with pytest.raises(ServerRestarted, match="restarted") as err:
        check_weights({"weights_id": "bbbb-0"}, "aaaa-3")
    assert err.value.got == "bbbb-0"
    for other in ({"weights_id": "aaaa-4"}, {}, {"weights_id": 4}, ["aaaa-3"]):
        with pytest.raises(StaleWeights, match="another client pushed others") as stale:
            check_weights(other, "aaaa-3")
        assert not isinstance(stale.value, ServerRestarted)


# --- a real server killed and started again on its port ---------------------------------------------


def _perturbed_weights(model_dir: str) -> dict[str, np.ndarray]:
    """The tiny model's weights moved far enough that its greedy completions change."""
    from safetensors.numpy import load_file

    rng = np.random.default_rng(0)
    weights = load_file(str(Path(model_dir) / "model.safetensors"))
    return {k: (v.astype(np.float32) + rng.normal(0, 0.2, v.shape)).astype(np.float32) for k, v in weights.items()}


@pytest.mark.slow  # two polyrl serve starts on one port, one after the other: ~16 s
def test_a_restarted_server_gets_the_last_weights_again_and_serves_from_them(tiny_model_dir, tmp_path):
    from structlog.testing import capture_logs

    token = tmp_path / "push-token"
    token.write_text("restart-test-" + "5c1e" * 8 + "\n")
    args = ("--allow-weight-push", "--weight-push-token-file", str(token))
    server = start_server(tiny_model_dir, *args)
    port = urlsplit(server.url).port
    engine = Engine(Registry(), "remote", EngineConfig(model=tiny_model_dir, role="generate", options={
        "servers": [f"{server.url}/v1"], "weight_push_token_file": str(token), "retries": 0}))
    exchanges: list[tuple[str, int, dict]] = []  # what the client sent and got back, in order
    exchange = engine.raw._exchange

    def recorded(index, url, body, headers=None):
        status, raw, wait = exchange(index, url, body, headers)
        exchanges.append((url, status, json.loads(raw) if status == 200 else {}))
        return status, raw, wait

    engine.raw._exchange = recorded
    engine.import_weights(_perturbed_weights(tiny_model_dir))
    prompts = [TokenPrompt([5, 6, 7]), TokenPrompt([9, 10]), TokenPrompt([11, 12, 13, 14])]
    greedy = SamplingParams(max_new_tokens=6, n=2, temperature=0.0)
    pushed = engine.generate(prompts, greedy)
    server.proc.kill()  # as the OOM killer does: no goodbye
    server.proc.wait()
    server.stop()
    restarted_server = start_server(tiny_model_dir, *args, "--port", str(port))
    try:
        initial = restarted_server.post("/v1/completions", json={
            "prompt": [5, 6, 7], "max_tokens": 6, "temperature": 0, "logprobs": 0, "return_token_ids": True})
        assert initial.json()["choices"][0]["token_ids"] != pushed[0].completion_ids.tolist()  # other weights
        seen = len(exchanges)
        with capture_logs() as logs:
            again = engine.generate(prompts, greedy)  # three requests at once meet the same restart
        assert restarted_server.stats()["weight_version"] == 1  # pushed again once, not once per request
        after = exchanges[seen:]
        pushes = [data for url, _, data in after if url.endswith("/polyrl/weights")]
        assert len(pushes) == 1 and weights_instance(pushes[0]["weights_id"]) != weights_instance(
            exchanges[0][2]["weights_id"])
        # each request's reply came from the weights pushed again (a reply sent before that push
        # finished, from the initial weights, was asked again, never used)
        replies = [data["weights_id"] for url, _, data in after if url.endswith("/v1/completions")]
        assert replies.count(pushes[0]["weights_id"]) == 3
        assert set(replies) <= {pushes[0]["weights_id"], f"{weights_instance(pushes[0]['weights_id'])}-0"}
        # trained on what the pushed weights give, not on the restarted server's initial weights
        assert [c.completion_ids.tolist() for c in again] == [c.completion_ids.tolist() for c in pushed]
        for a, b in zip(again, pushed):
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
        warned = [e for e in logs if e["log_level"] == "warning" and "restarted" in e["event"]]
        assert len(warned) == 1 and warned[0]["server"] == f"{restarted_server.url}/v1"
    finally:
        restarted_server.stop()
