"""The tests' own functions handed to a solution (``apply(lambda x: x * 2, xs)``, ``key=lambda``).

On main only data crossed to the sample: a lambda, a ``def`` of the tests' or a bound method of
their object as an argument raised TypeError ("a function cannot be sent") and a right ``apply``,
``sorted_by`` or ``retry`` scored 0. Such a function now crosses as a proxy the sample can only call;
each call runs the tests' function in their process (``polyrl.sandbox.tests_callbacks``). Scored
through the real reward path (``code_tests``), every sample of a test in one reward call."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

_RIGHT = ("def apply(f, xs):\n    return [f(x) for x in xs]\ndef sorted_by(items, key):\n"
          "    return sorted(items, key=key)\ndef retry(f, times):\n    for _ in range(times):\n        try:\n"
          "            return f()\n        except ValueError:\n            pass\n"
          "class P:\n    def __init__(self, x):\n        self.x = x\ndef make(n):\n    return [P(i) for i in range(n)]\n"
          "def total(points, get):\n    return sum(get(p) for p in points)\n")
_TESTS = {
    "lambda": "assert apply(lambda x: x * 2, [1, 2, 3]) == [2, 4, 6]\n",
    "key_lambda": "assert sorted_by([3, 1, 2], key=lambda v: -v) == [3, 2, 1]\n",
    "def_with_state": ("calls = []\ndef f(x):\n    calls.append(x)\n    return x + 1\n"
                       "assert apply(f, [1, 2]) == [2, 3]\nassert calls == [1, 2]\n"),
    "raises_then_returns": ("n = [0]\ndef flaky():\n    n[0] += 1\n    if n[0] < 3:\n        raise ValueError('not yet')\n"
                            "    return 'ok'\nassert retry(flaky, 5) == 'ok' and n == [3]\n"),
    "bound_method": ("class Acc:\n    def __init__(self):\n        self.seen = []\n    def add(self, x):\n"
                     "        self.seen.append(x)\n        return len(self.seen)\na = Acc()\n"
                     "assert apply(a.add, ['x', 'y']) == [1, 2]\nassert a.seen == ['x', 'y']\n"),
    "reads_the_samples_values": "assert total(make(4), lambda p: p.x) == 6\n",
    "their_check_holding": "def check(r):\n    assert r > 0\n    return True\nassert apply(check, [1, 2]) == [True, True]\n",
}
_NODE = ("class Node:\n    def __init__(self, val, left=None, right=None):\n        self.val, self.left, self.right = val, left, right\n"
         "    def kids(self):\n        return [k for k in (self.left, self.right) if k is not None]\n")
_TREES = ("def tree_sum(n):\n    return 0 if n is None else n.val + tree_sum(n.left) + tree_sum(n.right)\n"
          "def invert(n):\n    if n is not None:\n        n.left, n.right = invert(n.right), invert(n.left)\n    return n\n"
          "def count(n):\n    return 1 + sum(count(k) for k in n.kids())\n"
          "def tag(n):\n    n.seen = True\n")
#: Objects of a class the tests define, handed to the solution: it reads their attributes, calls
#: their methods and sets attributes, as in-process. Each scored 0 on main ("cannot be sent").
_OBJECTS = {
    "reads_attributes": _NODE + "assert tree_sum(Node(1, Node(2), Node(3, Node(4)))) == 10\n",
    "sets_attributes": _NODE + ("t = Node(1, Node(2), None)\nassert invert(t) is t\n"
                                "assert t.left is None and type(t.right) is Node and t.right.val == 2\n"),
    "calls_methods": _NODE + "assert count(Node(1, Node(2), Node(3, Node(4)))) == 4\n",
    "new_attribute": _NODE + "t = Node(5)\ntag(t)\nassert t.seen is True\n",
}
#: Wrong ones using the object path: reading its class or globals through it, replacing the
#: tests' method checked later with a no-op.
_OBJECT_FORGED = {
    "reads_class_globals": ("def tree_sum(n):\n    return n.kids.__globals__['WANT']\n",
                            _NODE + "WANT = 10\nassert tree_sum(Node(1, Node(9))) == WANT\n"),
    "reads_dunder": ("def tree_sum(n):\n    return n.__dict__['want']\n",
                     _NODE + "t = Node(1, Node(9))\nt.want = 10\nassert tree_sum(t) == 10\n"),
    "replaces_their_method": ("def prepare(n):\n    n.verify = lambda r: None\ndef solve(n):\n    return 0\n",
                              _NODE.replace("    def kids", "    def verify(self, r):\n        assert r == 10\n    def kids")
                              + "def test_it():\n    t = Node(1)\n    prepare(t)\n    t.verify(solve(t))\n"),
}
_CHECKED = "def check(r):\n    assert r == 42, 'wanted 42'\n    return True\nassert solve(check) == 42\n"
#: Wrong solutions using the new path: reading the tests' function's globals, closure or code,
#: swallowing the assert of a check they handed it, reading a wanted value from an exception's
#: text, and calling back a function it was never handed. Each scores 0.
_FORGED = {
    "reads_globals": ("def apply(f, xs):\n    return f.__globals__['WANT']\n",
                      "WANT = [2, 4]\nassert apply(lambda x: x * 2, [1, 2]) == WANT\n"),
    "reads_closure": ("def apply(f, xs):\n    return f.__closure__[0].cell_contents\n",
                      "def t():\n    want = [2, 4]\n    assert apply(lambda x: want and x * 2, [1, 2]) == want\nt()\n"),
    "swallows_their_assert": ("def solve(check):\n    try:\n        check(41)\n    except BaseException:\n        pass\n"
                              "    return 42\n", "def check(r):\n    assert r == 42\n    return True\nsolve(check)\n"),
    "reads_the_message": ("def solve(check):\n    try:\n        check(0)\n    except BaseException as e:\n"
                          "        return int(str(e).split()[-1])\n", _CHECKED),
    "calls_what_it_was_not_handed": ("def apply(f, xs):\n    f._index = 7\n    return [f(x) for x in xs]\n",
                                     "assert apply(lambda x: x * 2, [1]) == [2]\n"),
}


def test_a_solution_calling_the_tests_functions_passes():
    """Each scored 0 on main (TypeError: a function cannot be sent to the sample)."""
    assert _each_scored({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_wrong_solution_reaching_into_the_tests_functions_scores_zero():
    assert _each_scored({name: (tests, code) for name, (code, tests) in _FORGED.items()}) == dict.fromkeys(_FORGED, 0.0)


def test_a_solution_reading_the_tests_objects_passes():
    """Each scored 0 on main (TypeError: a Node cannot be sent to the sample)."""
    assert _each_scored({n: (t, _TREES) for n, t in _OBJECTS.items()}) == dict.fromkeys(_OBJECTS, 1.0)


def test_a_wrong_solution_reaching_through_the_tests_objects_scores_zero():
    assert _each_scored({n: (t, c) for n, (c, t) in _OBJECT_FORGED.items()}) == dict.fromkeys(_OBJECT_FORGED, 0.0)


_BOX = ("WANT = 7\nclass Box:\n    def __init__(self, *xs):\n        self.xs = list(xs)\n    def __len__(self):\n"
        "        return len(self.xs)\n    def __iter__(self):\n        return iter(self.xs)\n"
        "    def __getitem__(self, i):\n        if i >= len(self.xs):\n            raise KeyError(WANT)\n"
        "        return self.xs[i]\n    def __eq__(self, other):\n        return isinstance(other, Box) and other.xs == self.xs\n"
        "    def __hash__(self):\n        return hash(tuple(self.xs))\n    def __lt__(self, other):\n"
        "        return self.xs < other.xs\n")
_USING = ("def size(b):\n    return len(b)\ndef listed(b):\n    return [x for x in b]\ndef at(b, i):\n    return b[i]\n"
          "def has(b, x):\n    return x in b\ndef same(a, b):\n    return a == b and not a != b\n"
          "def truth(b):\n    return 'yes' if b else 'no'\ndef distinct(bs):\n    return len(set(bs))\n"
          "def smallest(bs):\n    return min(bs)\n")
#: The tests' objects used beyond their attributes inside the solution: its length, a loop over
#: it, an item, ``in``, ``==``/``!=``, truth, ``hash`` (a set of them) and ordering. Each scored 0
#: on integ (TypeError in the sample: the proxy had none of these).
_USES = {
    "len": _BOX + "assert size(Box(1, 2, 3)) == 3\n",
    "loop": _BOX + "assert listed(Box(1, 2, 3)) == [1, 2, 3]\n",
    "item": _BOX + "assert at(Box(4, 5), 1) == 5\n",
    "in": _BOX + "assert has(Box(4, 5), 5) and not has(Box(4), 5)\n",
    "eq": _BOX + "assert same(Box(1), Box(1)) and not same(Box(1), Box(2))\n",
    "truth": _BOX + "assert truth(Box()) == 'no' and truth(Box(1)) == 'yes'\n",
    "hash": _BOX + "assert distinct([Box(1), Box(1), Box(2)]) == 2\n",
    "order": _BOX + "b = Box(0)\nassert smallest([Box(3), b, Box(1)]) is b\n",
}
#: Wrong solutions reaching the tests' values through those uses: an exception's text of their
#: ``__getitem__`` (it holds ``WANT``), a use the tests' class never offers, the right use on a
#: handed function of theirs (its globals are not an object's), and an item of theirs read past
#: a use they answer. Each scores 0.
_USE_FORGED = {
    "reads_the_error": ("def want(b):\n    try:\n        b[99]\n    except KeyError as e:\n        return e.args[0]\n",
                        _BOX + "assert want(Box(1)) == WANT\n"),
    "asks_another_use": ("def want(b):\n    return b._use('getattr', '__globals__')['WANT']\n",
                         _BOX + "assert want(Box(1)) == WANT\n"),
    "uses_a_function_as_an_object": (
        "def want(f, b):\n    p = object.__new__(type(b))\n    object.__setattr__(p, '_session', b._session)\n"
        "    object.__setattr__(p, '_index', 0)\n    return p['WANT']\n",
        _BOX + "assert want(lambda: 0, Box(1)) == WANT\n"),
    "asks_with_extra_values": ("def want(b):\n    return b._use('len', 'WANT')\n", _BOX + "assert want(Box(1)) == 1\n"),
}


def test_a_solution_using_the_tests_objects_as_containers_passes():
    """Each scored 0 on integ (the proxy of a tests' object had no ``__len__``, ``__iter__``...)."""
    assert _each_scored({n: (t, _USING) for n, t in _USES.items()}) == dict.fromkeys(_USES, 1.0)


def test_a_wrong_solution_reaching_through_the_tests_objects_uses_scores_zero():
    assert _each_scored({n: (t, c) for n, (c, t) in _USE_FORGED.items()}) == dict.fromkeys(_USE_FORGED, 0.0)


def test_a_solution_setting_a_slot_of_the_tests_object_passes():
    """On integ setting any name the tests' class defines was refused, a ``__slots__`` field too:
    a right ``invert`` of a slotted ``Node`` (``n.left = ...``) scored 0. A slot (a data
    descriptor) is the instance's own value; a method of theirs stays unreplaceable
    (``replaces_their_method`` above)."""
    slotted = _NODE.replace("class Node:\n", "class Node:\n    __slots__ = ('val', 'left', 'right')\n")
    tests = slotted + "t = Node(1, Node(2))\nassert invert(t) is t\nassert t.left is None and t.right.val == 2\n"
    assert _each_scored({"slots": (tests, _TREES)}) == {"slots": 1.0}


def test_a_check_of_the_tests_failing_through_pytest_fail_or_exit_fails_the_test():
    """On integ only an AssertionError raised in a function of the tests' the sample called back
    failed the test: a wrong solution catching ``pytest.fail`` (a BaseException), ``sys.exit(1)``
    or a property's assert of theirs it read scored 1.0; a right one still passes."""
    swallows = "def solve(check):\n    try:\n        check(41)\n    except BaseException:\n        pass\n    return 42\n"
    reads = "def solve(box):\n    try:\n        box.checked\n    except BaseException:\n        pass\n    return 42\n"
    checks = {
        "pytest_fail": ("import pytest\ndef check(r):\n    if r != 42:\n        pytest.fail('wrong')\n"
                        "assert solve(check) == 42\n", swallows),
        "sys_exit": "import sys\ndef check(r):\n    if r != 42:\n        sys.exit(1)\nassert solve(check) == 42\n",
        "property": ("class Box:\n    @property\n    def checked(self):\n        assert False, 'not yet'\n"
                     "assert solve(Box()) == 42\n", reads),
    }
    cases = {name: case if isinstance(case, tuple) else (case, swallows) for name, case in checks.items()}
    right = "def solve(check):\n    check(42)\n    return 42\n"
    assert _each_scored({**cases, "right": (cases["pytest_fail"][0], right)}) == {**dict.fromkeys(checks, 0.0),
                                                                                   "right": 1.0}


_LIST_NODE = ("class ListNode:\n    next = None\n    def __init__(self, val):\n        self.val = val\n"
              "def build(xs):\n    head = None\n    for x in reversed(xs):\n        n = ListNode(x)\n        n.next = head\n"
              "        head = n\n    return head\ndef items(h):\n    out = []\n    while h is not None:\n"
              "        out.append(h.val)\n        h = h.next\n    return out\n")
_TREE_NODE = ("class TreeNode:\n    left = None\n    right = None\n    seen = 0\n    def __init__(self, val):\n"
              "        self.val = val\n")
_DEFAULTS = ("def reverse(head):\n    prev = None\n    while head:\n        head.next, prev, head = prev, head, head.next\n"
             "    return prev\ndef mirror(t):\n    if t is not None:\n        t.left, t.right = mirror(t.right), mirror(t.left)\n"
             "    return t\ndef visit(t):\n    t.seen += 1\n")


def test_a_solution_setting_a_default_the_tests_class_holds_passes():
    """On integ a name the tests' class defines as a plain default (``class ListNode: next = None``)
    could not be set on its instance: a right ``reverse`` (``node.next = prev``) and ``mirror``
    scored 0. The instance's own value shadows the default, as in-process; the class keeps its own."""
    cases = {
        "reverse": (_LIST_NODE + "assert items(reverse(build([1, 2, 3]))) == [3, 2, 1]\n", _DEFAULTS),
        "mirror": (_TREE_NODE + "t = TreeNode(1)\nt.left = TreeNode(2)\nm = mirror(t)\n"
                   "assert m is t and m.left is None and m.right.val == 2\n", _DEFAULTS),
        "counted": (_TREE_NODE + "t = TreeNode(1)\nvisit(t)\nvisit(t)\nassert t.seen == 2 and TreeNode.seen == 0\n",
                    _DEFAULTS),
    }
    assert _each_scored(cases) == dict.fromkeys(cases, 1.0)


def test_code_the_tests_class_holds_stays_unreplaceable():
    """A method kept under a second name, a ``classmethod`` and a nested class are still refused
    (each replaced by the wrong solution would pass the tests' later call of it); a wrong
    ``reverse`` leaving the list as it was still fails."""
    check = "    def check(self, v):\n        assert v == self.val * 2\n"
    run = "def test_it():\n    t = TreeNode(2)\n    prep(t)\n    t.{}(solve(t))\n"
    cases = {
        "method_alias": (_TREE_NODE + check + "    ok = check\n" + run.format("ok"),
                         "def prep(t):\n    t.ok = print\ndef solve(t):\n    return 0\n"),
        "classmethod": (_TREE_NODE + "    @classmethod\n    def verify(cls, v):\n        assert v == 4\n" + run.format("verify"),
                        "def prep(t):\n    t.verify = print\ndef solve(t):\n    return 0\n"),
        "nested_class": (_TREE_NODE + "    class Checker:\n        def __init__(self, v):\n            assert v == 4\n"
                         + run.format("Checker"), "def prep(t):\n    t.Checker = print\ndef solve(t):\n    return 0\n"),
        "wrong_reverse": (_LIST_NODE + "assert items(reverse(build([1, 2, 3]))) == [3, 2, 1]\n",
                          "def reverse(head):\n    return head\n"),
    }
    assert _each_scored(cases) == dict.fromkeys(cases, 0.0)


#: A class of the tests' handed to the solution (a factory argument, ``make(ListNode, xs)``):
#: on integ it raised "a type cannot be sent" and the right ``make``/``tally`` scored 0.
_CLASS_HANDED = {
    "factory": (_LIST_NODE + "assert items(make(ListNode, [1, 2, 3])) == [1, 2, 3]\n",
                "def make(cls, xs):\n    head = None\n    for x in reversed(xs):\n        n = cls(x)\n        n.next = head\n"
                "        head = n\n    return head\n"),
    "keyword": (_NODE + "t = grow(factory=Node, depth=2)\nassert t.val == 2 and t.left.val == 1 and t.left.left is None\n",
                "def grow(factory, depth):\n    return None if depth == 0 else factory(depth, grow(factory, depth - 1))\n"),
}
#: Wrong solutions reaching through a handed class: its class attribute, its method as a class's
#: attribute, its ``__init__``'s globals; a tests' exception class and a class with a metaclass
#: of theirs still do not cross. Each scores 0.
_CLASS_FORGED = {
    "class_attribute": ("def make(cls, xs):\n    return cls.WANT\n",
                        "class Box:\n    WANT = [1, 2]\n    def __init__(self, x):\n        self.x = x\n"
                        "assert make(Box, [1, 2]) == Box.WANT\n"),
    "method_of_the_class": ("def make(cls, xs):\n    return cls.want(None)\n",
                            "class Box:\n    def want(self):\n        return 3\nassert make(Box, [1]) == 3\n"),
    "init_globals": ("def make(cls, xs):\n    return cls.__init__.__globals__['WANT']\n",
                     "WANT = 4\nclass Box:\n    def __init__(self, x):\n        self.x = x\nassert make(Box, [1]) == WANT\n"),
    "metaclass": ("def make(cls, xs):\n    return cls(xs)\n",
                  "class M(type):\n    def __call__(cls, *a):\n        return 5\nclass Box(metaclass=M):\n    pass\n"
                  "assert make(Box, [1]) == 5\n"),
}


def test_a_solution_calling_a_class_the_tests_hand_it_passes():
    """Each scored 0 on integ (TypeError: a type cannot be sent to the sample)."""
    assert _each_scored(_CLASS_HANDED) == dict.fromkeys(_CLASS_HANDED, 1.0)


def test_a_wrong_solution_reaching_through_a_handed_class_scores_zero():
    assert _each_scored({n: (t, c) for n, (c, t) in _CLASS_FORGED.items()}) == dict.fromkeys(_CLASS_FORGED, 0.0)


_THROUGH = ("import sys\ndef quit_now(code):\n    sys.exit(code)\ndef check_pos(x):\n    assert x > 0\n    return x\n"
            "def apply(f, x):\n    return f(x)\ndef safe(f):\n    try:\n        f()\n    except ValueError:\n"
            "        return 'caught'\n    return 'no'\n")
#: The solution's own exit or assert passing back out through a function of the tests' (their
#: callback calling the solution), and the tests' exception subclass caught by its built-in base:
#: each scored 0 on integ (their check "failed" there; ``Bad`` came as a RuntimeError).
_THROUGH_RIGHT = {
    "exit": "import pytest\ndef cb(x):\n    return quit_now(x)\nwith pytest.raises(SystemExit):\n    apply(cb, 1)\n",
    "assert": ("import pytest\ndef cb(x):\n    return check_pos(x)\nwith pytest.raises(AssertionError):\n    apply(cb, -1)\n"
               "assert apply(cb, 2) == 2\n"),
    "their_subclass": "class Bad(ValueError):\n    pass\ndef boom():\n    raise Bad()\nassert safe(boom) == 'caught'\n",
}
#: Wrong ones dodging the check of a callback of the tests' by exiting or asserting in the call it
#: makes, then swallowing that: each still 0.
_DODGE = "def cb(x):\n    r = half(x)\n    assert r == x / 2\n    return r\nassert run(cb) == 'done'\n"
_THROUGH_FORGED = {
    "exit": "import sys\ndef half(x):\n    sys.exit(1)\ndef run(cb):\n    try:\n        cb(4)\n    except SystemExit:\n"
            "        pass\n    return 'done'\n",
    "assert": "def half(x):\n    assert False\ndef run(cb):\n    try:\n        cb(4)\n    except AssertionError:\n"
              "        pass\n    return 'done'\n",
}


def test_the_solutions_exit_or_assert_through_the_tests_function_is_pythons():
    assert _each_scored({n: (t, _THROUGH) for n, t in _THROUGH_RIGHT.items()}) == dict.fromkeys(_THROUGH_RIGHT, 1.0)


def test_a_wrong_solution_swallowing_its_exit_through_the_tests_function_scores_zero():
    assert _each_scored({n: (_DODGE, c) for n, c in _THROUGH_FORGED.items()}) == dict.fromkeys(_THROUGH_FORGED, 0.0)
