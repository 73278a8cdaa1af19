"""The tests setting an attribute of a solution's object (``a.next = b``, ``c.radius = 1``): a false zero on main.

A value of the sample's is a stand-in in the tests, whose ``__setattr__`` raised TypeError
("values that live in the sample cannot be changed from the tests"), so a right linked list whose
nodes the tests link, or a class whose attribute they set, failed. The tests' own assignment (and
their ``setattr``) now calls the sample's ``__setattr__``, counted as a method of the value called
as a statement (``remote.Remote.__setattr__``). Scored through the real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored
from test_sandbox_forging import IS_PRIME

pytestmark = pytest.mark.faults

_RIGHT = ("class Node:\n    def __init__(self, val):\n        self.val, self.next = val, None\n"
          "def length(head):\n    n = 0\n    while head:\n        n, head = n + 1, head.next\n    return n\n"
          "class Circle:\n    def __init__(self, r):\n        self.radius = r\n    @property\n    def radius(self):\n"
          "        return self._r\n    @radius.setter\n    def radius(self, v):\n        if v < 0:\n"
          "            raise ValueError('negative radius')\n        self._r = v\n    def area(self):\n"
          "        return 3.14 * self._r ** 2\n"
          "class Account:\n    def __init__(self):\n        self.balance = 0\n    def deposit(self, x):\n"
          "        self.balance += x\n")
_TESTS = {
    "link_nodes": "a, b = Node(1), Node(2)\na.next = b\nassert length(a) == 2 and a.next.val == 2\n",
    "plain_value": "a = Account()\na.balance = 10\na.deposit(5)\nassert a.balance == 15\n",
    "setattr_builtin": "a = Account()\nsetattr(a, 'balance', 3)\nassert a.balance == 3\n",
    "property_setter": ("import pytest\nc = Circle(1)\nc.radius = 2\nassert c.area() == 12.56\n"
                        "with pytest.raises(ValueError):\n    c.radius = -1\n"),
}
#: A wrong ``primes`` whose three non-primes go when the tests set an attribute of its value, and
#: wrong ``__setattr__``s ending the sample with success. Each scores 0.
_EMPTIED = ("class R:\n    def __init__(self, n):\n        object.__setattr__(self, 'xs', [4] * n)\n"
            "    def __len__(self):\n        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n"
            "    def __setattr__(self, name, value):\n        object.__setattr__(self, 'xs', [])\n"
            "def primes(n):\n    return R(n)\n")
_EXITS = ("import {module}\nclass Account:\n    def __init__(self):\n        object.__setattr__(self, 'balance', 0)\n"
          "    def __setattr__(self, name, value):\n        {call}\n    def deposit(self, x):\n        pass\n")
_FORGED = {
    "emptied_by_the_set": (IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r.tag = 1\n"
                           "    assert all(is_prime(x) for x in r)\ntest()\n", _EMPTIED),
    "exit_zero": (_TESTS["plain_value"], _EXITS.format(module="sys", call="sys.exit(0)")),
    "os_exit_zero": (_TESTS["plain_value"], _EXITS.format(module="os", call="os._exit(0)")),
}


def test_the_tests_setting_an_attribute_of_a_solutions_object_pass():
    """Each scored 0 on main (TypeError: values that live in the sample cannot be changed)."""
    assert _each_scored({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_wrong_solution_behind_an_attribute_set_scores_zero():
    assert _each_scored(_FORGED) == dict.fromkeys(_FORGED, 0.0)


_CACHE = ("from collections import OrderedDict\nclass LRU:\n    def __init__(self, n):\n        self.n, self.d = n, OrderedDict()\n"
          "    def __setitem__(self, k, v):\n        self.d[k] = v\n        self.d.move_to_end(k)\n"
          "        if len(self.d) > self.n:\n            self.d.popitem(last=False)\n"
          "    def __getitem__(self, k):\n        self.d.move_to_end(k)\n        return self.d[k]\n"
          "    def __delitem__(self, k):\n        del self.d[k]\n    def size(self):\n        return len(self.d)\n")
_ITEMS = {
    "set_and_evict": ("import pytest\ndef test_evicts():\n    c = LRU(2)\n    c['a'] = 1\n    c['b'] = 2\n"
                      "    assert c['a'] == 1\n    c['c'] = 3\n    with pytest.raises(KeyError):\n        c['b']\n"
                      "    assert c.size() == 2\n"),
    "augmented": "c = LRU(2)\nc['a'] = 1\nc['a'] += 5\nassert c['a'] == 6\n",
    "delete": "c = LRU(2)\nc['a'] = 1\ndel c['a']\nassert c.size() == 0\n",
}
_ITEMS_FORGED = {
    "emptied_by_the_set": (IS_PRIME + "def test():\n    r = primes(3)\n    assert len(r) == 3\n    r[0] = 1\n"
                           "    assert all(is_prime(x) for x in r)\ntest()\n",
                           _EMPTIED.replace("def __setattr__(self, name, value)", "def __setitem__(self, k, v)")),
    "wrong_eviction": (_ITEMS["set_and_evict"], _CACHE.replace("last=False", "last=True")),
    "exit_zero": (_ITEMS["augmented"], _CACHE.replace("self.d[k] = v\n", "import sys\n        sys.exit(0)\n")),
}


def test_the_tests_setting_an_item_of_a_solutions_object_pass():
    """Each scored 0 on integ (TypeError: 'Remote' object does not support item assignment)."""
    assert _each_scored({name: (tests, _CACHE) for name, tests in _ITEMS.items()}) == dict.fromkeys(_ITEMS, 1.0)


def test_a_wrong_solution_behind_an_item_set_scores_zero():
    assert _each_scored(_ITEMS_FORGED) == dict.fromkeys(_ITEMS_FORGED, 0.0)
