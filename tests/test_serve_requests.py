"""``polyrl serve``'s request checks as plain functions (no server): values a hostile or careless
client sends that used to pass them and came back as garbage, a silently ignored field or a 500."""

from __future__ import annotations

import threading

import pytest

from polyrl.serve import Faults
from polyrl.serving import requests as req
from polyrl.serving.api_error import ApiError
from polyrl.serving.limits import Limits


def _refused(body: dict, param: str) -> str:
    with pytest.raises(ApiError) as caught:
        req.sampling(body, Limits(), 16)
    assert caught.value.status == 400 and caught.value.param == param, caught.value.message
    return caught.value.message


def test_a_repetition_penalty_too_small_to_sample_with_is_a_400_not_token_0_each_time():
    """1e-320 is 0 in float32: a seen token's logit / 0 is inf, every probability NaN, and the torch
    sampler answered 200 with token 0 (``<|endoftext|>``) at each step, as a tiny temperature did."""
    for tiny in (1e-320, 1e-300, 1e-6):
        assert "too small to sample with" in _refused({"repetition_penalty": tiny}, "repetition_penalty")
    assert req.sampling({"repetition_penalty": 1e-5}, Limits(), 16).repetition_penalty == 1e-5  # the edge
    assert req.sampling({"repetition_penalty": 1.3}, Limits(), 16).repetition_penalty == 1.3


def test_a_stop_string_with_a_lone_surrogate_is_a_400_not_a_stop_that_never_matches():
    """Decoded text never holds a lone surrogate (JSON's "\\ud800"), so such a stop string was
    accepted and matched nothing: the completion ran to max_tokens as if no stop were given."""
    for stop in ("\ud800", ["fine", "x\udfffy"]):
        assert "stop holds a lone surrogate" in _refused({"stop": stop}, "stop")
    assert req.sampling({"stop": ["é", "\n\n"]}, Limits(), 16).stop == ("é", "\n\n")


@pytest.mark.parametrize(("update", "field"), [
    ({"delay_s": "2"}, "delay_s"),
    ({"delay_s": float("nan")}, "delay_s"),
    ({"delay_s": -1}, "delay_s"),
    ({"die_after": "x"}, "die_after"),
    ({"fail_503_first": 1.5}, "fail_503_first"),
    ({"delay_first": True}, "delay_first"),
    ({"garbage": "yes"}, "garbage"),
    ({"delay_s": 0.5, "die_after": -3}, "die_after"),  # all or nothing: delay_s is not set either
])
def test_a_fault_of_the_wrong_type_is_a_400_and_changes_nothing(update, field):
    """``POST /polyrl/faults {"delay_s": "2"}`` was stored as given: every later generation request
    was a 500 (``'>' not supported between 'str' and 'int'``) until someone set it again."""
    faults = Faults()
    with pytest.raises(ApiError) as caught:
        faults.update(update)
    assert caught.value.status == 400 and caught.value.param == field, caught.value.message
    assert f"fault {field} must be" in caught.value.message
    assert faults == Faults()
    faults.update({"delay_s": 1, "die_after": 3, "garbage": True, "fail_503_first": 0, "delay_first": 2})
    assert faults == Faults(delay_s=1.0, delay_first=2, garbage=True, fail_503_first=0, die_after=3)
    faults.update({"die_after": None})
    assert faults.die_after is None


def test_a_client_taking_a_reply_a_trickle_at_a_time_is_cut_off_at_the_send_deadline():
    """The socket timeout bounds each send, so a client that took a big reply a KB at a time held
    its handler thread (and a --max-connections slot) for as long as it liked: 128 of them and the
    server answered everyone else 503. Now a reply must be taken within read_timeout_s plus a
    second per MiB. A real TCP connection whose buffers are small, so the reply cannot hide in them."""
    import socket
    import types

    from polyrl.serve import Handler, send_deadline_s
    from polyrl.serving.connections import Deadlines

    limits = Limits(read_timeout_s=1.0)
    payload = {"pad": "a" * (1 << 20)}
    assert send_deadline_s(1 << 20, limits) == 2.0
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(listener.getsockname())
    conn, _ = listener.accept()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    conn.settimeout(limits.read_timeout_s)  # as Handler.setup does
    handler = Handler.__new__(Handler)  # one connection's handler, without a model behind it
    handler.server = types.SimpleNamespace(deadlines=Deadlines(tick_s=0.05), limits=limits)  # type: ignore[assignment]
    handler.connection, handler.wfile = conn, conn.makefile("wb")
    handler.request_version, handler.requestline, handler.command = "HTTP/1.1", "POST / HTTP/1.1", "POST"
    handler.client_address, handler.close_connection = ("127.0.0.1", 0), False
    received, stop = [0], threading.Event()

    def trickle() -> None:  # 2 KB every 0.02 s: each send makes progress, the whole takes 10 s
        while not stop.is_set() and received[0] < len(payload["pad"]):
            try:
                chunk = client.recv(2048)
            except OSError:
                return
            if not chunk:
                return
            received[0] += len(chunk)
            stop.wait(0.02)

    reader = threading.Thread(target=trickle, daemon=True)
    writer = threading.Thread(target=handler._send, args=(200, payload), daemon=True)
    reader.start()
    writer.start()
    try:
        writer.join(60)  # a liveness bound far past the 2 s deadline, not a measure of the machine
        assert not writer.is_alive(), f"the reply is still being sent ({received[0]} bytes taken)"
        assert handler.close_connection
        reader.join(60)
        assert received[0] < len(payload["pad"])  # cut off, not sent whole
    finally:
        stop.set()
        client.close()
        conn.close()
        listener.close()


@pytest.mark.parametrize(("body", "param"), [
    ({"stop_token_ids": [2]}, "stop_token_ids"),
    ({"include_stop_str_in_output": False}, "include_stop_str_in_output"),
    ({"skip_special_tokens": False}, "skip_special_tokens"),
    ({"add_generation_prompt": False}, "add_generation_prompt"),
    ({"continue_final_message": True}, "continue_final_message"),
    ({"chat_template": "{{ messages }}"}, "chat_template"),
    ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ({"guided_json": {"type": "object"}}, "guided_json"),
    ({"guided_choice": ["yes", "no"]}, "guided_choice"),
    ({"use_beam_search": True}, "use_beam_search"),
    ({"truncate_prompt_tokens": 8}, "truncate_prompt_tokens"),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else None)
def test_vllm_fields_that_change_the_answer_are_refused_not_ignored(body, param):
    """vLLM's extensions were read as absent: stop_token_ids stopped nothing, add_generation_prompt
    false still added one, guided_json gave free text, and the 200 did not say so."""
    assert "not supported by polyrl serve" in _refused(body, param)


def test_vllm_fields_at_what_the_server_does_anyway_are_accepted():
    """Their values meaning what polyrl serve does are not refused: a client sending its defaults works."""
    same = {"stop_token_ids": [], "include_stop_str_in_output": True, "skip_special_tokens": True,
            "add_generation_prompt": True, "continue_final_message": False, "use_beam_search": False,
            "prompt_logprobs": None, "guided_json": None}
    assert req.sampling(same, Limits(), 16).stop == ()


@pytest.mark.parametrize("stop", [0, False, {}, ""])
def test_a_stop_of_the_wrong_type_or_empty_is_a_400_not_no_stop(stop):
    """``stop`` 0, false, {} and "" were falsy, so read as no stop at all: the completion ran on to
    max_tokens past the text the client meant to stop at."""
    assert "stop must be a non-empty string" in _refused({"stop": stop}, "stop")
    assert req.sampling({"stop": None}, Limits(), 16).stop == ()
    assert req.sampling({"stop": []}, Limits(), 16).stop == ()
