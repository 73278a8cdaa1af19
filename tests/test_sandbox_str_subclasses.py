"""A ``str`` subclass (a ``(str, Enum)`` member too) the solution returns: false zeros and a forgery.

``up('a').startswith('A')`` of a right ``up`` returning ``class S(str)`` raised (only a str the
sample returns as a value answered ``startswith``; a ``dict``/``list``/``set``/``tuple`` subclass
answered by its items, a str one did not), and a ``(str, Enum)`` member equal to ``'a'`` failed
``== 'a'``: its ``str()`` is ``'C.A'``. Both now read its text (``str.__str__``: the characters it
holds, never its own ``__str__``), and the harness answers on that text. A FORGERY that scored
1.0: a subclass holding ``'zz'`` whose ``__str__`` said ``'A'`` and whose ``__eq__`` said yes passed
``up('a') == 'A'`` (its ``str()`` was taken as its text, its own ``==`` agreeing); it scores 0 now,
as do those whose ``__eq__`` or ``startswith`` says yes to anything.
Scored through the real reward path (``code_tests``: sandbox, harness, the forked trainer copy).
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_S = "class S(str):\n    pass\ndef up(s):\n    return S(s.upper())\n"
_ENUM = "import enum\nclass C(str, enum.Enum):\n    A = 'a'\ndef f():\n    return C.A\n"
#: (tests, right solution).
RIGHT = {
    "subclass_startswith": ("assert up('a').startswith('A')\nassert up('ab').lower() == 'ab'\n", _S),
    "subclass_equal": ("assert up('a') == 'A'\n", _S),
    "enum_member_equal": ("assert f() == 'a'\n", _ENUM),
}
#: (tests, forged solution): subclasses holding 'zz' that say yes otherwise.
FORGED = {
    "equal_to_everything": ("assert up('a') == 'A'\n", "class S(str):\n    def __eq__(s, o):\n        return True\n"
                            "    __hash__ = str.__hash__\ndef up(s):\n    return S('zz')\n"),
    "startswith_anything": ("assert up('a').startswith('A')\n", "class S(str):\n    def startswith(s, *a):\n"
                            "        return True\ndef up(s):\n    return S('zz')\n"),
    "str_says_the_answer": ("assert up('a') == 'A'\n", "class S(str):\n    def __str__(s):\n        return 'A'\n"
                            "    def __eq__(s, o):\n        return True\n    __hash__ = str.__hash__\n"
                            "def up(s):\n    return S('zz')\n"),
}


def test_a_str_subclass_answers_by_its_text():
    """Right ones scored 0.5 on the first (its ``startswith`` test failed) and 0 on the last; 1.0 now."""
    assert _each_scored(RIGHT) == dict.fromkeys(RIGHT, 1.0)


def test_a_str_subclass_saying_yes_otherwise_fails():
    """``str_says_the_answer`` scored 1.0."""
    assert _each_scored(FORGED) == dict.fromkeys(FORGED, 0.0)
