"""The tests' ``__builtins__``: read as a module (a script's ``__main__``) or as a dict (an imported
test module), it gives what Python gives there, with the tests' own ``zip``/``map``/... on each route.

Right solutions must score 1.0 with each form (the attribute forms raised ``AttributeError`` on the
harness's plain dict, so they scored 0), and an empty answer must not pass a zip reached through
them. Real reward path: sandbox, harness, the forked copy of the trainer. See
``polyrl.sandbox.module_views.BuiltinsLayer``.
"""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults


def scores(table: dict[str, str], sample: str) -> dict[str, float]:
    """Each named test of ``table`` (one row each) scored against ``sample``, by name."""
    names = list(table)
    scored = score([sample] * len(names), rows=[{"prompt": "p", "tests": table[n]} for n in names])
    return dict(zip(names, scored.total))

#: Tests using ``__builtins__`` as a script or an imported module may; each holds for ``sorted``.
RIGHT = {
    "attribute_zip": "r = f([2, 1])\nassert all(a == b for a, b in __builtins__.zip(r, [1, 2]))",
    "attribute_len": "assert __builtins__.len(f([3, 1, 2])) == 3",
    "attribute_map": "assert list(__builtins__.map(abs, f([-1]))) == [1]",
    "getattr_map": "assert list(getattr(__builtins__, 'map')(str, f([2, 1]))) == ['1', '2']",
    "getattr_zip": "assert list(getattr(__builtins__, 'zip')(f([2, 1]), 'ab')) == [(1, 'a'), (2, 'b')]",
    "item_zip": "assert list(__builtins__['zip'](f([2, 1]), 'ab')) == [(1, 'a'), (2, 'b')]",
    "item_len": "assert __builtins__['len'](f([1, 2])) == 2",
    "either_form": "b = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)\n"
                   "assert b['sum'](f([1, 2])) == 3\nassert __builtins__.__dict__['max'](f([1, 2])) == 2\n"
                   "import copy\nassert copy.copy(__builtins__)['min'](f([1, 2])) == 1",
    "module_name": "assert __builtins__.__name__ == 'builtins' and 'zip' in dir(__builtins__)\n"
                   "assert __builtins__.sorted(f([2, 1])) == [1, 2]",
    "modules_copy": "import sys\nm = sys.modules.copy()\nassert m['builtins'].len(f([1])) == 1 and 'os' in m",
    "written_back": "__builtins__.polyrl_marker = 3\nassert polyrl_marker == 3 and f([2, 1]) == [1, 2]\n"
                    "assert __builtins__.polyrl_marker == 3 and __builtins__['polyrl_marker'] == 3",
    "module_written": "import builtins\nbuiltins.polyrl_helper = lambda r: r[0]\nassert polyrl_helper(f([2, 1])) == 1\n"
                      "assert builtins.polyrl_helper(f([3])) == 3\ndel builtins.polyrl_helper\n"
                      "assert not hasattr(builtins, 'polyrl_helper')",
}


def test_a_right_solution_passes_tests_that_use_builtins_as_a_module_or_a_dict():
    """``__builtins__.zip(r, [1, 2])``, ``__builtins__.len``, ``getattr(__builtins__, 'map')``
    raised ``'dict' object has no attribute`` in the harness (a script run as ``__main__`` gets
    the module there), so a right solution scored 0; the item form of an imported module still
    works, and what the tests set on it stays set after a call to the solution, as does a name they
    set through ``import builtins`` (it raised NameError: the module's, not theirs); ``sys.modules.copy()``
    (the tests' view of it had no ``copy``) gives a dict of the modules."""
    assert scores(RIGHT, "def f(x):\n    return sorted(x)\n") == dict.fromkeys(RIGHT, 1.0)


#: Pairing an empty answer with expected items through ``__builtins__``: Python's zip holds vacuously.
FORGED = {
    "attribute_zip": "assert all(a == b for a, b in __builtins__.zip(f(2), [1.0]))",
    "item_zip": "assert all(a == b for a, b in __builtins__['zip'](f(2), [1.0]))",
    "getattr_zip": "assert all(a == b for a, b in getattr(__builtins__, 'zip')(f(2), [1.0]))",
    "dict_zip": "assert all(a == b for a, b in __builtins__.__dict__['zip'](f(3), [1.0, 2.0]))",
    "attribute_map": "import operator\nassert all(__builtins__.map(operator.eq, f(2), [1.0]))",
}


def test_an_empty_answer_never_passes_a_zip_reached_through_builtins():
    """The forms above give the tests' zip and map, and a one-item expected list beside the answer is
    a known place, so ``return []`` (or a generator yielding nothing) scores 0; the right answer 1.0."""
    for forged in ("def f(x):\n    return []\n", "def f(x):\n    return (y for y in [])\n"):
        assert {n: s for n, s in scores(FORGED, forged).items() if s != 0.0} == {}, forged
    assert scores(FORGED, "def f(x):\n    return [1.0, 2.0][:x - 1]\n") == dict.fromkeys(FORGED, 1.0)


#: Other routes from the ``builtins`` module to zip and map the tests may take without meaning to.
MODULE_ROUTES = {
    "star_import": "from builtins import *\nassert all(a == b for a, b in zip(f(2), [1, 2]))",
    "vars": "import builtins\nassert all(a == b for a, b in vars(builtins)['zip'](f(2), [1, 2]))",
    "dict_get": "import builtins\nassert all(a == b for a, b in builtins.__dict__.get('zip')(f(2), [1, 2]))",
    "aliased": "import builtins as b\nimport operator\nassert all(b.__dict__['map'](operator.eq, f(2), [1, 2]))",
    "import_as": "from builtins import zip as z\nassert all(a == b for a, b in z(f(1), [1.0]))",
    "importlib_import": "import importlib\nassert all(a == b for a, b in importlib.__import__('builtins').zip(f(2), [1, 2]))",
    "builtins_len": "import builtins\nr, e = f(2), [1, 2]\nassert all(r[i] == e[i] for i in range(builtins.len(r)))",
}


def test_other_routes_through_the_builtins_module_give_the_tests_zip():
    """``from builtins import *``, ``vars(builtins)``, ``builtins.__dict__.get`` and an alias of the
    module give the tests' zip and map; ``from builtins import zip as z`` beside one expected item
    (no known place), ``importlib.__import__('builtins').zip`` (Python's zip) and ``builtins.len``
    counting a loop that indexes expected values (Python's len) passed ``return []``. Now
    ``return []`` scores 0 on each, the right answer 1.0."""
    assert {n: s for n, s in scores(MODULE_ROUTES, "def f(x):\n    return []\n").items() if s != 0.0} == {}
    honest = "def f(x):\n    return [1.0, 2.0][:x]\n"
    assert scores(MODULE_ROUTES, honest) == dict.fromkeys(MODULE_ROUTES, 1.0)


#: ``len.__self__`` is the builtins module in Python; each test holds for ``sorted``.
LEN_SELF = {
    "is_builtins": "import builtins\nassert len.__self__ is builtins and len.__self__.__name__ == 'builtins'\n"
                   "assert len(f([2, 1])) == 2",
    "its_len": "assert len.__self__.len(f([3, 1, 2])) == 3 and len.__self__.sorted(f([2, 1])) == [1, 2]",
    "its_zip": "assert list(len.__self__.zip(f([2, 1]), 'ab')) == [(1, 'a'), (2, 'b')]",
}


def test_len_self_is_the_tests_builtins_module():
    """The tests' ``len`` is a stand-in (``pairing.tests_pairing``), so ``len.__self__`` raised
    AttributeError and a right solution scored 0 on a test reading it; now it is the tests' view of
    the builtins module, as ``import builtins`` gives it, whose ``zip`` is theirs: ``return []``
    fails ``len.__self__.zip(f(2), [1.0])`` beside an expected item."""
    assert scores(LEN_SELF, "def f(x):\n    return sorted(x)\n") == dict.fromkeys(LEN_SELF, 1.0)
    forged = {"zip": "assert all(a == b for a, b in len.__self__.zip(f(2), [1.0]))"}
    assert scores(forged, "def f(x):\n    return []\n") == {"zip": 0.0}
    assert scores(forged, "def f(x):\n    return [1.0]\n") == {"zip": 1.0}


#: A builtin function's ``__self__`` is the builtins module in Python; each test holds for ``sorted``.
FUNCTION_SELF = {
    "print_zip": "r = f([2, 1])\nassert all(a == b for a, b in print.__self__.zip(r, [1, 2]))",
    "abs_dict_zip": "assert list(abs.__self__.__dict__['zip'](f([2, 1]), 'ab')) == [(1, 'a'), (2, 'b')]",
    "module_attr": "import builtins\nassert all(a == b for a, b in builtins.sorted.__self__.zip(f([2, 1]), [1, 2]))",
    "getattr_map": "import operator\nassert all(getattr(max, '__self__').map(operator.eq, f([2, 1]), [1, 2]))",
    # still the builtins they stand for: names, identity, keys, and passed to the solution by name
    "as_before": "import builtins\nassert print is builtins.print and abs.__name__ == 'abs' and print.__self__ is builtins\n"
                 "assert sorted(f([-3, 1]), key=abs) == [1, -3] and max(f([2, 1])) == 2\n"
                 "assert apply(abs, -2) == 2 and apply(sum, f([1, 2])) == 3",
}


def test_a_builtin_functions_self_is_the_tests_builtins_module():
    """``print.__self__`` (any builtin function's) was Python's own ``builtins`` module, whose zip
    held vacuously for ``return []`` beside an expected item. The tests' builtin functions are
    bound to their view of the module now (``module_views.bound_builtins``), so its zip and map are
    theirs: ``return []`` scores 0, the right answer 1.0, and they still call, name and pass as
    the builtins (the frame readers, ``globals``, ``eval``, ``dir``..., stay Python's)."""
    apply = "def apply(fn, x):\n    return fn(x)\n"
    forged = {name: tests for name, tests in FUNCTION_SELF.items() if name != "as_before"}
    assert scores(forged, "def f(x):\n    return []\n" + apply) == dict.fromkeys(forged, 0.0)
    assert scores(FUNCTION_SELF, "def f(x):\n    return sorted(x)\n" + apply) == dict.fromkeys(FUNCTION_SELF, 1.0)
