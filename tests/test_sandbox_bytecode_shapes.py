"""The bytecode readers give one verdict per test shape on every Python in ``READ_ON``.

Why: ``shrinking.looped_here`` (through ``item_free_loops``) reads the tests' compiled code, whose
shape changes between versions: Python 3.12 drops ``PRECALL`` (``sum(1 for _ in q) == 0``, a
right cleared queue counted, read as a check: a false 0) and inlines list and set comprehensions
(PEP 709: ``[x for x in q] == []``, a copy compared, read as a check); 3.13 asks ``bool`` at a
``TO_BOOL`` before the jump (``assert r`` read as no assertion) and fuses ``STORE_FAST`` and
``LOAD_FAST``. These verdicts are 3.11's;
run under each version ``READ_ON`` names (``tests_bytecode``), they must not move.
"""

from __future__ import annotations

import pytest
from polyrl.sandbox.asserted_truths import asserted_here
from polyrl.sandbox.shrinking import looped_here, not_in_here, view_looped_here


class _Probe:
    """An empty value recording, at each ``__iter__`` or view load, whether a loop was seen there."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def __iter__(self):
        self.seen.append(looped_here())
        return iter([])

    def __bool__(self) -> bool:
        self.seen.append(asserted_here())
        return False

    def __contains__(self, item: object) -> bool:
        self.seen.append(not_in_here())
        return False

    def __getattr__(self, name: str):
        self.seen.append(view_looped_here())
        return lambda: {}.items()


#: (source, whether the reading of ``r`` there is a check an empty value holds vacuously: a loop
#: checking its items, an asserted truth, ``not in``); False: a whole reading (counted, copied and
#: compared, or failing) or no check.
_SHAPES = [
    ("for x in r:\n    assert x > 0\n", True),
    ("n = 0\nfor x in r:\n    n += 1\n", False),
    ("assert all(x > 0 for x in r)\n", True),
    ("assert sum(1 for _ in r) == 0\n", False),
    ("assert sum(1 for _ in sorted(r)) == 0\n", False),
    ("assert [x for x in r] == []\n", False),
    ("assert len([x for x in r]) == 0\n", False),
    ("assert {x for x in r} == set()\n", False),
    ("assert [x for x in r] == sorted(w)\n", False),
    ("assert [x for x in r] == d.copy()\n", False),
    ("assert [1 for _ in r] == []\n", False),
    ("assert {x for x in r} <= {1}\n", True),
    ("assert all([x for x in r])\n", True),
    ("c = [x for x in r]\n", True),
    ("assert [x + 1 for x in r] == []\n", True),
    ("assert [x for x in r if x] == []\n", True),
    ("assert {x: 1 for x in r} == {}\n", True),
    # a comprehension whose variable a lambda captures (a cell: 3.11's own code stores it by
    # ``STORE_DEREF``, 3.12+ inline it behind ``MAKE_CELL``) reads as a check on every version
    ("assert all([(lambda: x > 0)() for x in r])\n", True),
    ("assert [x for x in r if (lambda: x > 0)()] == []\n", True),
    ("assert [(lambda: x)() for x in r] == []\n", True),
    ("assert len([lambda: x for x in r]) == 0\n", True),
    ("for x in sorted(r):\n    assert x > 0\n", True),
    ("n = 0\nfor x in sorted(r):\n    n += 1\n", False),
    ("for _ in r:\n    raise AssertionError('left')\n", False),
    ("for k, v in r.items():\n    assert v\n", True),
    ("n = 0\nfor k, v in r.items():\n    n += 1\n", False),
    ("assert sum(1 for _ in r.keys()) == 0\n", False),
    # ``asserted_truths``: a ``bool`` whose false branch raises (3.13 asks it at a ``TO_BOOL``)
    ("try:\n    assert r\nexcept AssertionError:\n    pass\n", True),
    ("try:\n    assert r, 'empty'\nexcept AssertionError:\n    pass\n", True),
    ("try:\n    assert r and True\nexcept AssertionError:\n    pass\n", True),
    ("try:\n    if not r:\n        raise AssertionError(f'e {1}')\nexcept AssertionError:\n    pass\n", True),
    ("if r:\n    pass\n", False),
    ("b = bool(r)\n", False),
    # ``not_in_here``
    ("assert 4 not in r\n", True),
    ("assert (4 in r) or True\n", False),
]


@pytest.mark.parametrize("scope", ["module", "function"])
@pytest.mark.parametrize(("source", "loop"), _SHAPES)
def test_each_shape_reads_as_on_python_3_11(source: str, loop: bool, scope: str) -> None:
    if scope == "function":
        source = "def t():\n" + "".join(f"    {line}\n" for line in source.splitlines()) + "t()\n"
    probe = _Probe()
    exec(compile(source, "<test>", "exec"), {"r": probe, "w": [], "d": []})
    assert probe.seen == [loop]
