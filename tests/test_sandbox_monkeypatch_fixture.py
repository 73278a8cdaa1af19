"""``fixtures.Patches``, the ``monkeypatch`` a tests' ``test_*`` function gets: each change undone.

Why: what a test patches in the tests' copy of the trainer (``builtins.input``, ``os.environ``, a
module's attribute) must not outlive it, or the next test (and, with ``tests_in = "trainer"``, the
trainer) runs with it."""

from __future__ import annotations

import builtins
import os
import types

import pytest

from polyrl.sandbox.fixtures import patching


def test_every_change_is_undone_in_reverse_order():
    module = types.SimpleNamespace(value=1)

    class Box:
        @staticmethod
        def make() -> int:
            return 1

    data = {"kept": 1}
    original_input = builtins.input
    os.environ.pop("POLYRL_PATCHED", None)
    with patching() as mp:
        mp.setattr("builtins.input", lambda *a: "5")
        mp.setattr(module, "value", 2)
        mp.setattr(module, "value", 3)
        mp.setattr(module, "new", 4, raising=False)
        mp.setattr(Box, "make", staticmethod(lambda: 2))
        mp.setitem(data, "kept", 2)
        mp.setitem(data, "added", 3)
        mp.delitem(data, "missing", raising=False)
        mp.setenv("POLYRL_PATCHED", 7)
        assert builtins.input() == "5" and module.value == 3 and module.new == 4 and Box().make() == 2
        assert data == {"kept": 2, "added": 3} and os.environ["POLYRL_PATCHED"] == "7"
    assert builtins.input is original_input and module.value == 1 and not hasattr(module, "new")
    assert Box().make() == 1 and isinstance(Box.__dict__["make"], staticmethod)
    assert data == {"kept": 1} and "POLYRL_PATCHED" not in os.environ


def test_undone_when_the_test_fails_and_wrong_calls_raise():
    module = types.SimpleNamespace(value=1)
    with pytest.raises(AssertionError), patching() as mp:
        mp.setattr(module, "value", 2)
        raise AssertionError
    assert module.value == 1
    with patching() as mp:
        with pytest.raises(AttributeError):
            mp.setattr(module, "missing", 1)
        with pytest.raises(TypeError):
            mp.setattr(module, "value")
        with pytest.raises(ValueError):
            mp.setattr("input", 1)
        with pytest.raises(KeyError):
            mp.delitem({}, "x")
