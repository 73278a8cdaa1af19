"""A solution calling ``input()`` under tests that patch it: a false zero on main.

KodCode-style pytest cells give input with ``unittest.mock.patch('builtins.input', ...)`` or
pytest's ``monkeypatch.setattr('builtins.input', ...)``. Those patched the trainer's ``input``,
while the sample's ran in its own process on an empty stdin (EOFError), and a test naming
``monkeypatch`` was called with no argument (TypeError): a right solution scored 0. Now a call the
tests make while their ``input`` is patched lets each of the sample's ``input(prompt)`` ask it
(``polyrl.sandbox.tests_input``, ``server._TestsInput``), and ``monkeypatch`` is given
(``fixtures.Patches``), undone when its test ends. A sample that asks when the tests patched
nothing (it must never reach the trainer's own ``input``) or sends anything but a str prompt is
stopped, and one ignoring its input still fails. Scored through the real reward path."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_RIGHT = ("def square():\n    return int(input('Number: ')) ** 2\n"
          "def total():\n    s = 0\n    while True:\n        try:\n            s += int(input())\n"
          "        except EOFError:\n            return s\n"
          "def main():\n    name = input()\n    print(f'Hello, {name}!')\n")
_TESTS = {
    "patch_return_value": ("from unittest.mock import patch\nwith patch('builtins.input', return_value='4'):\n"
                           "    assert square() == 16\n"),
    "patch_decorator_side_effect": (
        "from unittest.mock import patch\n@patch('builtins.input', side_effect=['1', '2', '3', EOFError])\n"
        "def test_total(mock_input):\n    assert total() == 6\n    assert mock_input.call_count == 4\n"),
    "prompt_seen_by_the_mock": ("from unittest.mock import patch\n"
                                "def test_prompt():\n    with patch('builtins.input', return_value='3') as m:\n"
                                "        assert square() == 9\n    m.assert_called_once_with('Number: ')\n"),
    "monkeypatch_and_capsys": ("def test_main(monkeypatch, capsys):\n"
                               "    monkeypatch.setattr('builtins.input', lambda: 'Ann')\n    main()\n"
                               "    assert capsys.readouterr().out == 'Hello, Ann!\\n'\n"),
    "monkeypatch_builtins_module": ("import builtins\ndef test_square(monkeypatch):\n"
                                    "    monkeypatch.setattr(builtins, 'input', lambda prompt: '5')\n"
                                    "    assert square() == 25\n"),
    "monkeypatch_sys_stdin": ("import io\ndef test_square(monkeypatch):\n"
                              "    monkeypatch.setattr('sys.stdin', io.StringIO('6\\n'))\n    assert square() == 36\n"),
    "monkeypatch_undone_after_its_test": (
        "import builtins\ndef test_square(monkeypatch):\n    monkeypatch.setattr('builtins.input', lambda p: '2')\n"
        "    assert square() == 4\ndef test_restored():\n    assert builtins.input is __builtins__['input']\n"
        "    assert builtins.input.__module__ == 'builtins'\n"),
}
#: A forged ``square``: asks on the answer channel itself, as ``server._TestsInput`` does, and returns 16.
_ASKS = ("import gc, __main__\ndef square():\n    chan = [o for o in gc.get_objects() if type(o) is __main__._Channel][0]\n"
         "    chan.send({{'input': {prompt}}})\n    chan.recv()\n    return 16\n")
_FORGED = {
    # no input is patched: the harness must not answer with the trainer's own ``input``
    "asks_when_nothing_is_patched": ("assert square() == 16\n", _ASKS.format(prompt="[]")),
    "sends_an_object_as_prompt": (_TESTS["patch_return_value"], _ASKS.format(prompt="[['r', 0]]")),
    "sends_two_prompts": (_TESTS["patch_return_value"], _ASKS.format(prompt="['a', 'b']")),
    "ignores_its_input": ("from unittest.mock import patch\nfor x in ('2', '3'):\n"
                          "    with patch('builtins.input', return_value=x):\n        assert square() == int(x) ** 2\n",
                          "def square():\n    return 4\n"),
}


def test_a_solution_reading_patched_input_passes():
    """Each scored 0 on main (EOFError in the sample; ``monkeypatch`` raised TypeError)."""
    assert _each_scored({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_sample_abusing_the_input_exchange_scores_zero():
    assert _each_scored(_FORGED) == dict.fromkeys(_FORGED, 0.0)
