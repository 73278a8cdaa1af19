"""A value of a class of the solution's that derives from dict, list, set or tuple compares with the
tests' containers and answers ``get``/``count``/``index`` by its items, as in Python, and never by
methods of its own that would see the tests' values.

Through the real reward path (``code_tests``), a right ``freq(s)`` returning ``class D(dict)``
failed ``freq('aab') == {'a': 2, 'b': 1}`` and ``freq('aab').get('a') == 2``, and a ``list``
subclass failed ``== [1, 2, 3]``: such a value stays in the sample and was never equal to the
tests' data. See ``polyrl.sandbox.remote.Remote._container_data``.
"""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

FREQ = "def freq(s):\n    d = D()\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n    return d\n"
#: (tests, right solution returning a subclass of a built-in container).
SUBCLASSES = {
    "dict_equal": ("assert freq('aab') == {'a': 2, 'b': 1} and {'a': 2, 'b': 1} == freq('aab')",
                   "class D(dict):\n    pass\n" + FREQ),
    "dict_get": ("d = freq('aab')\nassert d.get('a') == 2 and d.get('z', 0) == 0 and d['b'] == 1",
                 "class D(dict):\n    def total(self):\n        return sum(self.values())\n" + FREQ),
    "dict_get_in_a_loop": ("assert all(freq('abc').get(c) == 1 for c in 'abc')", "class D(dict):\n    pass\n" + FREQ),
    "list_equal_and_queries": ("r = f(3)\nassert r == [1, 2, 3] and r != [1, 2] and r.index(2) == 1 and r.count(1) == 1",
                               "class L(list):\n    pass\ndef f(n):\n    return L(range(1, n + 1))\n"),
    # ``+`` with a str, list or tuple of the tests' joins them with its items (a TypeError scored 0)
    "joined_with_the_tests_values": ("w = word('ab')\nassert w + 'x' == 'abx' and 'x' + w == 'xab'\n"
                                     "assert f(2) + [9] == [1, 2, 9] and (0,) + g(1) == (0, 1)",
                                     "from collections import UserString\nclass W(UserString):\n    pass\n"
                                     "class L(list):\n    pass\nclass T(tuple):\n    pass\ndef word(s):\n"
                                     "    return W(s)\ndef f(n):\n    return L(range(1, n + 1))\ndef g(n):\n"
                                     "    return T(range(1, n + 1))\n"),
    "set_and_tuple": ("assert f(3) == {1, 2, 3} and g(2) == (1, 2)",
                      "class S(set):\n    pass\nclass T(tuple):\n    pass\ndef f(n):\n    return S(range(1, n + 1))\n"
                      "def g(n):\n    return T(range(1, n + 1))\n"),
    # collections' User* classes, exact (the trainer's own) or derived, and the collections.abc ABCs
    "userdict": ("from collections import UserDict\nd = freq('aab')\nassert d == {'a': 2, 'b': 1} and d.get('a') == 2 "
                 "and d['b'] == 1 and isinstance(d, UserDict)",
                 "from collections import UserDict\nD = UserDict\n" + FREQ),
    "userlist_and_userstring": ("r = f(3)\nassert r == [1, 2, 3] and r.count(1) == 1 and r.index(2) == 1\n"
                                "g = greet('Bob')\nassert g == 'Hi Bob' and g.startswith('Hi') and g.count('b') == 1 "
                                "and g + '!' == 'Hi Bob!'",
                                "from collections import UserList, UserString\ndef f(n):\n    return UserList(range(1, n + 1))\n"
                                "def greet(n):\n    return UserString('Hi ' + n)\n"),
    "userdict_subclass": ("d = freq('aab')\nassert d == {'a': 2, 'b': 1} and d.get('a') == 2 and d.get('z') is None",
                          "from collections import UserDict\nclass D(UserDict):\n    pass\n" + FREQ),
    "userlist_and_userstring_subclasses": ("assert f(3) == [1, 2, 3] and f(3).count(2) == 1\n"
                                           "assert greet('Bob').startswith('Hi') and greet('Bob') == 'Hi Bob'",
                                           "from collections import UserList, UserString\nclass L(UserList):\n    pass\n"
                                           "class S(UserString):\n    pass\ndef f(n):\n    return L(range(1, n + 1))\n"
                                           "def greet(n):\n    return S('Hi ' + n)\n"),
    "mapping_and_set_abcs": ("d = freq('aab')\nassert d == {'a': 2, 'b': 1} and d.get('b') == 1\n"
                             "assert evens(5) == {0, 2, 4} and evens(5).issubset({0, 2, 4, 6})",
                             "from collections.abc import Mapping, Set\nclass M(Mapping):\n    def __init__(self, d):\n"
                             "        self.d = d\n    def __getitem__(self, k):\n        return self.d[k]\n"
                             "    def __len__(self):\n        return len(self.d)\n    def __iter__(self):\n"
                             "        return iter(self.d)\nclass S(Set):\n    def __init__(self, xs):\n"
                             "        self.xs = set(xs)\n    def __contains__(self, x):\n        return x in self.xs\n"
                             "    def __len__(self):\n        return len(self.xs)\n    def __iter__(self):\n"
                             "        return iter(self.xs)\ndef freq(s):\n    return M({c: s.count(c) for c in s})\n"
                             "def evens(n):\n    return S(range(0, n, 2))\n"),
    "mapping_views": ("d = freq('aab')\nassert len(d) == 2 and sorted(d.values()) == [1, 2]\n"
                      "assert dict(d.items()) == {'a': 2, 'b': 1} and sorted(d.keys()) == ['a', 'b']\n"
                      "for k, v in d.items():\n    assert d[k] == v and d.get(k) == v",
                      "from collections import UserDict\nclass D(UserDict):\n    pass\n" + FREQ),
    # an object of no container class is still unequal to any container, and the run goes on
    "plain_object": ("p = make(3)\nassert p != [3] and not p == {'n': 3} and p.n == 3",
                     "class P:\n    def __init__(self, n):\n        self.n = n\ndef make(n):\n    return P(n)\n"),
}

#: (tests, forgery): a subclass whose own ``==`` or ``get`` agrees with anything, over wrong items,
#: and an object of no container class at all.
FORGED = {
    "eq_always": ("assert f(3) == [1, 2, 3]",
                  "class L(list):\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
                  "def f(n):\n    return L()\n"),
    "get_always_one": ("assert all(freq('abc').get(c) == 1 for c in 'abc')",
                       "class D(dict):\n    def get(self, k, d=None):\n        return 1\ndef freq(s):\n    return D()\n"),
    "claims_to_be_a_dict": ("assert freq('ab') == {'a': 1, 'b': 1}",
                            "class Liar:\n    __class__ = property(lambda self: dict)\n    def __eq__(self, o):\n"
                            "        return True\n    def keys(self):\n        return []\ndef freq(s):\n    return Liar()\n"),
    "not_a_container": ("assert f(3) == [1, 2, 3]",
                        "class Any:\n    def __eq__(self, o):\n        return True\ndef f(n):\n    return Any()\n"),
    "wrong_items": ("assert freq('aab') == {'a': 2, 'b': 1}", "class D(dict):\n    pass\ndef freq(s):\n    return D(a=2)\n"),
    "userdict_eq_always": ("assert freq('ab') == {'a': 1, 'b': 1}",
                           "from collections import UserDict\nclass D(UserDict):\n    def __eq__(self, o):\n"
                           "        return True\ndef freq(s):\n    return D()\n"),
    "userdict_get_always_one": ("assert all(freq('abc').get(c) == 1 for c in 'abc')",
                                "from collections import UserDict\nclass D(UserDict):\n    def get(self, k, d=None):\n"
                                "        return 1\ndef freq(s):\n    return D()\n"),
    "patched_userdict": ("assert freq('ab') == {'a': 1, 'b': 1} and freq('ab').get('a') == 1",
                         "import collections\ncollections.UserDict.__eq__ = lambda s, o: True\n"
                         "collections.UserDict.get = lambda s, k, d=None: 1\n"
                         "def freq(s):\n    return collections.UserDict()\n"),
    "mapping_get_always_one": ("assert all(freq('abc').get(c) == 1 for c in 'abc')",
                               "from collections.abc import Mapping\nclass M(Mapping):\n    def __getitem__(self, k):\n"
                               "        raise KeyError(k)\n    def __len__(self):\n        return 0\n"
                               "    def __iter__(self):\n        return iter(())\n    def get(self, k, d=None):\n"
                               "        return 1\n    def __eq__(self, o):\n        return True\n"
                               "def freq(s):\n    return M()\n"),
    # keys for len, then none: its own views were read empty, so loops over them held vacuously
    "mapping_views_emptied_after_len": ("def check():\n    d = freq('abc')\n    assert len(d) == 3\n"
                                        "    assert all(v == 1 for v in d.values())\n    for k, v in d.items():\n"
                                        "        assert v == 1\n    for k in d.keys():\n        assert d[k] == 1\ncheck()",
                                        "from collections.abc import Mapping\nclass M(Mapping):\n    def __init__(self, d):\n"
                                        "        self.d, self.n = d, 0\n    def __getitem__(self, k):\n"
                                        "        return self.d[k]\n    def __len__(self):\n        return len(self.d)\n"
                                        "    def __iter__(self):\n        self.n += 1\n"
                                        "        return iter(self.d if self.n == 1 else {})\n"
                                        "def freq(s):\n    return M({c: 2 for c in s})\n"),
    "userstring_add_says_yes": ("assert word('ab') + 'x' == 'abx'",
                                "from collections import UserString\nclass W(UserString):\n"
                                "    def __add__(self, o):\n        return UserString('abx')\ndef word(s):\n"
                                "    return W('zz')\n"),
    "userstring_says_yes": ("assert greet('Bob').startswith('Hi') and greet('Bob').count('b') == 1",
                            "from collections import UserString\nclass S(UserString):\n    def startswith(self, *a):\n"
                            "        return True\n    def count(self, *a):\n        return 1\ndef greet(n):\n    return S('Yo')\n"),
}


def test_a_right_solution_returning_a_container_subclass_passes():
    """Its items, as the built-in container it derives from, compare with the tests' value,
    answer ``get``, ``index`` and ``count`` and join a str, list or tuple of theirs by ``+``
    (``Remote._arith``): these right solutions scored 0 and score 1.0 (an
    object of no container class stays unequal to the tests' containers)."""
    names = list(SUBCLASSES)
    rows = [{"prompt": "p", "tests": SUBCLASSES[n][0]} for n in names]
    scored = score([SUBCLASSES[n][1] for n in names], rows=rows)
    assert dict(zip(names, scored.total)) == dict.fromkeys(names, 1.0)


def test_a_container_subclass_never_answers_by_its_own_methods():
    """An ``__eq__`` that always agrees, a ``get`` that always says 1, a class claiming to be a dict,
    an object of no container class and a ``Mapping`` whose views came empty after ``len`` read 3
    keys score 0: only the items cross, compared here, one reading of them."""
    names = list(FORGED)
    rows = [{"prompt": "p", "tests": FORGED[n][0]} for n in names]
    scored = score([FORGED[n][1] for n in names], rows=rows)
    assert dict(zip(names, scored.total)) == dict.fromkeys(names, 0.0)
