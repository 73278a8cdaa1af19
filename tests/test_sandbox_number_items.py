"""Right answers whose items are number objects Python compares equal to the tests' numbers.

``[np.int64(2), ...]``, ``[Fraction(2), ...]``, ``[Decimal(2), ...]`` or items of an ``int``
subclass of the solution's equal ``[2, 3, 5, 7]`` in Python, and each such item passed ``r[i] ==
x`` in the sandbox, yet the container itself came back as no plain data, so ``assert primes(4) ==
[2, 3, 5, 7]`` scored 0 (and ``== {'a': 2}``, ``== {2, 3}`` too). Each is scored through the real
reward path (``code_tests``); wrong answers of the same kinds, and objects whose own ``__eq__``
says yes to anything, still score 0 (``remote.Remote._items_of``).
"""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

_PRIMES = "assert primes(4) == [2, 3, 5, 7]"
#: (tests, a right solution Python's ``==`` holds for): each scored 0 before.
RIGHT = {
    "numpy_ints": (_PRIMES, "import numpy as np\ndef primes(n):\n    return [np.int64(x) for x in [2, 3, 5, 7][:n]]\n"),
    "numpy_array_listed": (_PRIMES, "import numpy as np\ndef primes(n):\n    return list(np.array([2, 3, 5, 7][:n]))\n"),
    "numpy_floats": (_PRIMES, "import numpy as np\ndef primes(n):\n    return [np.float64(x) for x in [2, 3, 5, 7][:n]]\n"),
    "fractions": (_PRIMES, "from fractions import Fraction\ndef primes(n):\n    return [Fraction(x) for x in [2, 3, 5, 7][:n]]\n"),
    "decimals": (_PRIMES, "from decimal import Decimal\ndef primes(n):\n    return [Decimal(x) for x in [2, 3, 5, 7][:n]]\n"),
    "int_subclass": (_PRIMES, "class P(int):\n    pass\ndef primes(n):\n    return [P(x) for x in [2, 3, 5, 7][:n]]\n"),
    "tuple": ("assert primes(4) == (2, 3, 5, 7)",
              "import numpy as np\ndef primes(n):\n    return tuple(np.int64(x) for x in [2, 3, 5, 7][:n])\n"),
    "nested": ("assert pairs() == [[1, 2], [3, 4]]",
               "import numpy as np\ndef pairs():\n    return [[np.int64(1), np.int64(2)], [np.int64(3), np.int64(4)]]\n"),
    "list_subclass": (_PRIMES, "import numpy as np\nclass L(list):\n    pass\n"
                               "def primes(n):\n    return L(np.int64(x) for x in [2, 3, 5, 7][:n])\n"),
    "dict_values": ("assert f() == {'a': 2, 'b': 3}", "import numpy as np\ndef f():\n    return {'a': np.int64(2), 'b': np.int64(3)}\n"),
    "dict_keys": ("assert f() == {2: 'a'}", "import numpy as np\ndef f():\n    return {np.int64(2): 'a'}\n"),
    "set": ("assert f() == {2, 3}", "import numpy as np\ndef f():\n    return {np.int64(2), np.int64(3)}\n"),
    "fractions_as_floats": ("assert halves() == [0.5, 1.5]",
                            "from fractions import Fraction\ndef halves():\n    return [Fraction(1, 2), Fraction(3, 2)]\n"),
    "assert_equal": ("import unittest\nclass T(unittest.TestCase):\n    def test_p(self):\n"
                     "        self.assertEqual(primes(4), [2, 3, 5, 7])\n",
                     "import numpy as np\ndef primes(n):\n    return [np.int64(x) for x in [2, 3, 5, 7][:n]]\n"),
}
#: (tests, a wrong solution): each scores 0.
WRONG = {
    "numpy_ints": (_PRIMES, "import numpy as np\ndef primes(n):\n    return [np.int64(x) for x in [2, 3, 5, 9]]\n"),
    "one_too_many": (_PRIMES, "import numpy as np\ndef primes(n):\n    return [np.int64(x) for x in [2, 3, 5, 7, 11]]\n"),
    "fractions": (_PRIMES, "from fractions import Fraction\ndef primes(n):\n    return [Fraction(x, 2) for x in [4, 6, 10, 15]]\n"),
    "equal_to_anything": (_PRIMES, "class P(int):\n    def __eq__(self, o):\n        return True\n"
                                   "    __hash__ = int.__hash__\ndef primes(n):\n    return [P(4) for _ in range(4)]\n"),
    "list_for_a_tuple": ("assert primes(4) == (2, 3, 5, 7)",
                         "import numpy as np\ndef primes(n):\n    return [np.int64(x) for x in [2, 3, 5, 7]]\n"),
    "a_list_equal_to_anything": (_PRIMES, "import numpy as np\nclass L(list):\n    def __eq__(self, o):\n"
                                          "        return True\ndef primes(n):\n    return L([np.int64(4)] * 4)\n"),
    "nested": ("assert pairs() == [[1, 2], [3, 4]]",
               "import numpy as np\ndef pairs():\n    return [[np.int64(1), np.int64(2)], [np.int64(3), np.int64(5)]]\n"),
    "dict_values": ("assert f() == {'a': 2, 'b': 3}", "import numpy as np\ndef f():\n    return {'a': np.int64(2), 'b': np.int64(4)}\n"),
    "keys_each_equal_to_2": ("assert f() == {2: 'a'}",
                             "class K:\n    def __init__(self, i):\n        self.i = i\n    def __int__(self):\n        return 2\n"
                             "    def __eq__(self, o):\n        return self is o if isinstance(o, K) else o == 2\n"
                             "    def __hash__(self):\n"
                             "        return 2\ndef f():\n    return {K(0): 'a', K(1): 'a'}\n"),
}


def _scored(cases: dict[str, tuple[str, str]]) -> dict[str, float]:
    rows = [{"prompt": "p", "tests": tests} for tests, _ in cases.values()]
    return dict(zip(cases, (float(x) for x in score([s for _, s in cases.values()], rows=rows).total)))


def test_a_container_of_number_objects_equal_to_the_tests_numbers_passes_as_in_python():
    assert _scored(RIGHT) == dict.fromkeys(RIGHT, 1.0)


def test_wrong_containers_of_number_objects_still_fail():
    assert _scored(WRONG) == dict.fromkeys(WRONG, 0.0)
