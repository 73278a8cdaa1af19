"""A value that lives in the sample, as the tests see it: every use of it is a request.

Why a module of its own: the tests' ``zip``/``map`` (``pairing``) and the harness both ask whether a
value is the sample's (``isinstance(v, Remote)``), and the rules of which questions such a value may
answer (``DATA_PREDICATES``, ``DATA_QUERIES``) belong with it, not with the running of the tests.
"""

from __future__ import annotations

import functools
import operator
import sys
from typing import TYPE_CHECKING, Any

from polyrl.sandbox.asserted_truths import asserted_here
from polyrl.sandbox.attribute_reads import attribute_looped_here, not_in_item_here
from polyrl.sandbox.channel import SampleStopped
from polyrl.sandbox.defaulted_reads import defaulted_here
from polyrl.sandbox.module_views import BOUND_CODE
from polyrl.sandbox.number_results import round_agrees, unary_agrees
from polyrl.sandbox.object_use import ANY_ROOT
from polyrl.sandbox.pandas_values import holds_pandas
from polyrl.sandbox.reader import Reader, same_items
from polyrl.sandbox.remote_exceptions import IteratorEnd
from polyrl.sandbox.shrinking import (
    gained, looped_here, not_in_here, returned_items, taken_back, view_looped_here)
from polyrl.sandbox.self_compared import self_compared_above, self_compared_here
from polyrl.sandbox.subset_reads import subset_here
from polyrl.sandbox.tests_guard import TESTS_FILES
from polyrl.sandbox.vacuous_counts import counted_vacuously_above, counted_vacuously_here
from polyrl.sandbox.values import MAX_ITEMS
from polyrl.sandbox.zipped_views import zipped_view_here
from polyrl.sandbox.suppressed import may_suppress

if TYPE_CHECKING:
    from polyrl.sandbox.harness import Session

#: Yes/no methods of the built-in str, bytes, set and number types. A sample's object (a
#: ``Remote``) never answers them: a ``str`` or ``set`` the solution returns comes over as itself
#: and answers here, while a class of its own whose every method says yes passed ``assert
#: greet(n).startswith("Hi")``, ``assert evens(xs).issubset({2, 4})`` and ``assert
#: half(x).is_integer()`` (it sees the question before it answers).
DATA_PREDICATES = frozenset({"startswith", "endswith"} | {
    name for kind in (str, bytes, bytearray, set, frozenset, int, float) for name in dir(kind)
    if name.startswith("is") and not name.startswith("__")})
#: Queries of the built-in str, list, tuple and dict types whose expected answer is often a fixed number
#: (``s.count(c) == 1`` for "no repeats", ``s.find(p) == 0`` for "starts with", ``-1`` for "not
#: there"). An object the sample returned from a call of one of its functions (``f(s)``: the tests
#: expect data from it, which comes over as itself) never answers them with arguments: an object
#: whose ``count`` always says 1 passed ``all(dedupe(s).count(c) == 1 for c in s)``. Other objects
#: of the sample's (its names' values, ``WORDS = Liar()``, and what a name spelled like a class
#: makes, ``Dedupe(s)``) answer them only where the tests use that name as an object
#: (``polyrl.sandbox.object_use``: ``uf = UnionFind(3); uf.union(0, 1); uf.find(0)``,
#: ``tally.add('a'); tally.count('a')``), or that are an instance of the class a name spelled like
#: a class is (``Words('a b a').count('a') == 2``) where the tests ask its queries only with
#: constant arguments outside loops (in a loop the expected answer is the same for every
#: argument, what the forgery gives: ``all(Dedupe(s).count(c) == 1 for c in s)`` of a ``class
#: Dedupe`` whose ``count`` says 1). Without arguments (``Stack().count()``) no str or list
#: answers them, so the object does; any other method too (``f(x).equals(y)`` expects an object,
#: whose own answer it is). A dict's ``get`` likewise: an object whose ``get`` gave 1 for any key
#: passed ``all(freq(s).get(c) == 1 for c in s)`` (a dict the sample returns comes over as itself).
DATA_QUERIES = frozenset({"count", "index", "find", "rfind", "rindex", "get"})
#: Methods whose True, asked with no arguments of a sample's value, is the tests seeing it empty
#: (``Remote._emptied_unseen``): ``s.clear(); assert s.is_empty()`` and then a loop over ``s``
#: scored 0.67. The sample answers them, so a True it gives while holding items only lets a loop
#: read those items; a True over none is what the tests asked to see (``queue.Queue.empty``).
EMPTINESS = frozenset({"is_empty", "isEmpty", "isempty", "empty"})
#: A mapping's views, which a dict-like value the tests expect data from gives over its items as
#: data (``Remote._container_data``): a ``Mapping`` whose ``__iter__`` gave 3 keys to ``len`` and
#: none to its own ``values()`` after passed ``len(d) == 3`` and a loop over ``d.values()``.
_MAPPING_VIEWS = frozenset({"keys", "values", "items"})
#: Names a value of the sample's answers from the sample, as its own (``add.__name__ == 'add'`` raised
#: AttributeError: dunder lookups stay local); ``__doc__`` is ``_SampleDoc``'s.
_NAMING = frozenset({"__name__", "__qualname__"})
#: The tests' numbers an object of the sample's equals, orders against and combines with through
#: its own number (``Remote._plain_answer``); bool is a number, as in Python (``Num(1) == True``).
_NUMBERS = frozenset({int, float, bool})
#: Orderings of the sample's value against a number: how -> the harness's own, on numbers.
_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
#: Binary operators of the sample's value with a number of the tests': how -> the harness's own.
_NUMBER_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
               "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "&": operator.and_,
               "|": operator.or_, "^": operator.xor}
#: The built-in containers a class of the sample's may derive from, whose items then stand for it
#: against the tests' container of a type (``Remote._container_data``).
_CONTAINERS = (dict, list, tuple, set, frozenset)
#: The container types whose items ``Remote._items_of`` reads one by one, by type name.
_BUILT: dict[str, type] = {kind.__name__: kind for kind in _CONTAINERS}
#: The tests' values ``+`` joins with a sample's value whose data is of the same type (``Remote._arith``).
_CONCATENATED = (str, list, tuple)
#: Built-in data with items, whose readings as an attribute are kept (``Remote._plain_attribute``).
_ITEMS_DATA = (list, tuple, dict, set, frozenset)
#: The tests' dict views that compare as sets (``d.keys()``, ``d.items()``), against which a sample's
#: set-like value (its ``dict_keys`` too) is its items as a set (``Remote.__eq__``). Why: a right
#: ``keys(d)`` returning ``d.keys()`` failed ``== {'a': 1}.keys()`` (each side's ``__eq__`` declined).
_SET_VIEWS: tuple[type, ...] = (type({}.keys()), type({}.items()))
#: Built-in data types, whose own ``__eq__`` never compares with a ``Remote``.
_PLAIN_TYPES = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
                          frozenset})


class Remote:
    """A value that lives in the sample; every use of it is a request.

    ``_data``: the tests expect built-in data from it (what a call returned, unless the callee is a
    solution name spelled like a class, or anything read from such a value); ``_origin``: the name
    it has among the solution's names, if any; ``_root``: the solution's name it was reached from;
    ``_query``: a ``DATA_QUERIES`` method that refuses to be called with arguments (see there);
    ``_kin``: its family (``Session.join``): what a call returned is of the family of the callee
    and its arguments, what is read from a value of that value's; a function among the solution's
    names is of none, so its answers are not of one family (``_snapshot``)."""

    __slots__ = ("_session", "_ref", "_kind", "_type", "_data", "_origin", "_root", "_query", "_made", "_counted",
                 "_reader", "_hash", "_plain", "_kin", "_seen", "_owner", "_from", "_base", "_attr",
                 "_asserted", "_view_of", "_key", "_attrs", "_indexed", "_entered")
    LIVES_IN_SAMPLE = True  # ``values.same_hash`` never hashes one (each hash is a request)

    def __init__(self, session: Session, ref: int, kind: str, type_name: str, data: bool = False,
                 origin: str | None = None, root: str | None = None, kin: int | None = None,
                 first: int | None = None) -> None:
        object.__setattr__(self, "_session", session)
        # requests go to the object's first handle (``sample_identity``); what is kept of this reach, under ``ref``
        object.__setattr__(self, "_ref", ref if first is None else first)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_type", type_name)
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_origin", origin)
        object.__setattr__(self, "_root", origin or root)
        object.__setattr__(self, "_query", False)
        object.__setattr__(self, "_made", False)
        #: ``_check_count``'s items, until the next request, and whether ``_snapshot`` kept them as a reading
        object.__setattr__(self, "_counted", None)
        object.__setattr__(self, "_reader", None)  # where the tests' iteration of its own iterator stands
        object.__setattr__(self, "_hash", None)  # the sample's hash of it, once asked (``__hash__``)
        object.__setattr__(self, "_plain", None)  # ``_equals_plain``'s answer, until the next request
        if kin is None and not (origin is not None and kind == "callable"):
            kin = ref  # a family of its own
        object.__setattr__(self, "_kin", kin)
        object.__setattr__(self, "_seen", None)  # ``_snapshot``'s items, the request they came at, their count
        object.__setattr__(self, "_owner", None)  # the value it was read from as an attribute (a method's receiver)
        object.__setattr__(self, "_from", frozenset())  # the sample's values a call made it with, at any depth
        object.__setattr__(self, "_base", None)  # the type of its data, once ``_container_data`` asked
        object.__setattr__(self, "_attr", None)  # the attribute of ``_owner`` it was read as
        object.__setattr__(self, "_asserted", None)  # the request whose true ``bool`` an assert checked
        object.__setattr__(self, "_view_of", None)  # the value whose ``items()``/``keys()``/``values()`` it is
        object.__setattr__(self, "_key", ref)  # what the tests' readings of it are kept under (``_same_attribute``)
        object.__setattr__(self, "_attrs", None)  # attribute name -> the value last read as it (``_same_attribute``)
        object.__setattr__(self, "_indexed", False)  # whether ``_read_for_index`` was tried (once: a failure stays one)
        object.__setattr__(self, "_entered", None)  # the requests made when its ``with`` block began (``__exit__``)

    def _gives_data(self) -> bool:
        """Whether what calling it returns is data to the tests: anything but a solution name
        spelled like a class (``Stack(3)``, ``UnionFind(5)``); a function (``f``, ``make_list``) or
        a method (``Solution().dedupe(s)``, LeetCode's shape) returns data."""
        return self._origin is None or self._origin[:1].islower()

    def _asked_with_pandas(self) -> bool:
        """Whether its methods may be handed a pandas value of the tests' (``__call__``): an
        instance the tests made of a solution's class they name (``Solution().solve(df)``) or an
        object they use as one (``object_use``), never data they expect. Why: a DataFrame the
        solution returns crosses as the trainer's own (``pandas_values``), so what stays a handle
        and is asked ``f(x).equals(expected)`` is an object posing as one, whose own ``equals``
        (a class named DataFrame, a subclass of pandas') said True."""
        return not self._data and (self._made or self._root in self._session.objects)

    def _answers_queries(self) -> bool:
        """Whether its own ``DATA_QUERIES`` methods answer with arguments (see there): never for
        data the tests expect; for an object the tests use as one (``object_use.object_roots``),
        or an instance the tests made of a solution's class they name (``Words('a b a')``) where
        they ask it only with constant arguments outside loops (``object_use.varied_query_roots``)."""
        s = self._session
        if self._data:
            return False
        return self._root in s.objects or (self._made and not {self._root, ANY_ROOT} & s.varied)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._query and (args or kwargs):
            raise AttributeError(f"the sample's {self._type[:100]!r} object answers no str/list query "
                                 f"({', '.join(sorted(DATA_QUERIES))}) here: only a str, list or tuple it returns "
                                 "as a value does, or an object the tests use as one")
        owner = self._owner
        if owner is not None and not owner._asked_with_pandas() and holds_pandas([args, kwargs]):
            raise TypeError(f"a pandas value of the tests' is not sent to a method of the sample's "
                            f"{owner._type[:100]!r}: a DataFrame, Series or Index the solution returns crosses as "
                            "one (pandas' own methods answer), and only an object the tests make or use as one "
                            "is handed one")
        s = self._session
        passed = _families([args, kwargs])
        changes = self._root is None or bool({self._root, ANY_ROOT} & s.changers)
        s.touch(passed + [self._kin] if changes else passed)
        owner = self._owner
        if owner is not None:  # ``s.pop()``, ``shop.sell()`` in an assert may change ``s``, ``shop`` and its stock,
            attributes = (value._key for value in (owner._attrs or {}).values())  # and ``b.history`` (``b.withdraw()``)
            plain = s.plain_attributes.get(owner._key, {}).values()  # and ``b.log``, plain data (``_plain_attribute``)
            for ref in (owner._key, *owner._from, *attributes, *plain):
                s.call_on(ref)
        if self._kin is None and self._root in s.effect_calls:  # ``register('a')``: global state of the sample's
            s.touch_all()
        at = s.asks + 1
        s.handed.append((at, [*args, *kwargs.values()]))
        value = s.ask("call", self._gives_data(), root=self._root, passed=(args, kwargs), ref=self._ref,
                      kin=s.join(passed + [self._kin]),
                      args=[s.arg(a) for a in args], kwargs={str(k): s.arg(v) for k, v in kwargs.items()})
        if all(isinstance(given, Remote) for given in (*args, *kwargs.values())):
            s.silent.add(at)  # ``r.reset()``, ``show(r)``: may take only what it returns (``Session.changes``)
        if isinstance(value, Remote) and not self._gives_data() and value._type == self._origin:
            object.__setattr__(value, "_made", True)  # ``Words('a b a')``: an instance of the class named
        if isinstance(value, Remote):
            object.__setattr__(value, "_from", value._from | _made_with([args, kwargs]))
            s.returned_by.setdefault(value._key, []).append(at)  # ``Session.handed_to``
        if owner is not None and value is True and not args and not kwargs and self._attr in EMPTINESS:
            s.said_empty[owner._key] = at  # ``s.is_empty()``: the tests see it empty (``_emptied_unseen``)
            s.unconfirmed.pop(owner._key, None)
        if owner is not None and isinstance(value, Remote) and self._attr in _MAPPING_VIEWS and not args \
                and not kwargs:
            object.__setattr__(value, "_view_of", owner)  # ``d.items()`` of a class of the sample's (``_emptied_unseen``)
        if owner is not None:
            s.gave[at] = value  # what ``s.pop()`` or ``q.drain()`` took (``shrinking.taken_back``) from what was read
        return value

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type]:
        """``class T(Solution)`` in the tests: a local class standing for the sample's class as a
        base (``subclassed.sample_base``); Python called the stand-in as a metaclass (TypeError),
        so a right solution failed every test of such a cell."""
        from polyrl.sandbox.subclassed import sample_base  # it reads ``Remote``s: imported when used
        return (sample_base(self),)

    def __instancecheck__(self, instance: Any) -> bool:
        """``isinstance(s, Stack)`` of the sample's value and class, as the sample's types say
        (``server._subtype``: the class in the value's type's MRO, never a metaclass's own
        ``__instancecheck__`` or a ``__class__`` it claims); it raised TypeError here, so a right
        solution failed. The tests' own values are never the sample's instances."""
        part = getattr(type(instance), "__polyrl_sample_class__", None)  # ``T()`` of ``class T(Stack)``
        if isinstance(part, Remote) and part._session is self._session:
            return part is self or self.__subclasscheck__(part)
        if not isinstance(instance, Remote) or instance._session is not self._session:
            return False
        return self._session.ask("isinstance", False, ref=instance._ref, cls=self._ref) is True

    def __subclasscheck__(self, subclass: Any) -> bool:
        """``issubclass(Child, Base)`` of two of the sample's classes, as ``__instancecheck__``."""
        if not isinstance(subclass, Remote) or subclass._session is not self._session:
            return False
        return self._session.ask("issubclass", False, ref=subclass._ref, cls=self._ref) is True

    @property  # type: ignore[misc]
    def __class__(self) -> Any:
        """``s.__class__`` written in the tests: the sample's real class of it, as the tests' ``type(s)``
        gives (``sample_types``), so ``s.__class__ is Stack`` and ``s.__class__.__name__ == 'Stack'``
        hold for a right solution (they were ``Remote``). Anywhere else (the harness's own
        ``isinstance`` checks, a library's), and in tests code that never names ``__class__``,
        ``Remote``: only a read the tests wrote asks the sample."""
        caller = sys._getframe(1)
        type_of = self._session.type_of
        if type_of is None or "__class__" not in caller.f_code.co_names or caller.f_code.co_filename not in TESTS_FILES:
            return Remote
        return type_of(self, caller)

    def __getattr__(self, name: str) -> Any:
        if name in _NAMING:
            return self._session.ask("getattr", False, root=self._root, ref=self._ref, kin=self._kin, name=name)
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol lookups (``__array__``, ...) stay local
        if name in DATA_PREDICATES:
            items = self._container_data()
            if items is not None and hasattr(items, name):
                return getattr(items, name)  # ``greet(n).startswith('Hi')`` of a ``UserString``: str's own
            raise AttributeError(f"{name}() of the sample's {self._type[:100]!r} object: only a str, bytes, set or "
                                 "number it returns as a value answers it")
        if name in DATA_QUERIES and not self._answers_queries():
            items = self._container_data()
            if items is not None and hasattr(items, name):
                return getattr(items, name)  # ``freq(s).get(c)`` of a dict subclass: dict's own, on its items
        if name in _MAPPING_VIEWS and self._data and not self._answers_queries():
            items = self._container_data(looped=view_looped_here() or zipped_view_here())  # ``for k, v in d.items()``
            if type(items) is dict:  # ``freq(s).values()`` of a Mapping: dict's own view of its items
                return getattr(items, name)
        s = self._session
        value = s.ask("getattr", self._data, root=self._root, ref=self._ref, kin=self._kin, name=name)
        if type(value) in _ITEMS_DATA:  # asked only here: most attributes are methods (``s.push``)
            if not self_compared_here() and not counted_vacuously_here():  # ``b.log == b.log``, ``len(b.log) >= 0``
                self._plain_attribute(name, value, attribute_looped_here(), not_in_item_here())
        if isinstance(value, Remote) and name in DATA_QUERIES and not self._answers_queries():
            object.__setattr__(value, "_query", True)
        if isinstance(value, Remote):
            object.__setattr__(value, "_owner", self)
            object.__setattr__(value, "_attr", name)
            self._same_attribute(name, value)
        return value

    def _same_attribute(self, name: str, value: Remote) -> None:
        """Take ``value``, read as attribute ``name`` of this value, for the one read as it before
        (``b.history`` read again): its readings (``_snapshot``) and what the tests saw of it are
        kept under one key. Why: each read is a new value to the tests (the sample hands a new
        reference, a property's new object, or a copy), with no reading before it, so a forged
        ``Bank`` whose ``history`` gave ``len`` three -5s and nothing after ``b.reset()`` passed
        ``len(b.history) == 3`` and then a loop over ``b.history`` (1.0), where ``h = b.history``
        read once and looped over failed. A method (a callable) keeps its own."""
        if value._kind == "callable":
            return
        attrs = self._attrs
        if attrs is None:
            attrs = {}
            object.__setattr__(self, "_attrs", attrs)
        before = attrs.get(name)
        if before is not None and before._kin == value._kin:
            object.__setattr__(value, "_key", before._key)
            object.__setattr__(value, "_seen", before._seen)
        attrs[name] = value

    def _plain_attribute(self, name: str, value: Any, looped: bool, asked: tuple[Any, ...] = ()) -> None:
        """Keep this reading of attribute ``name``, built-in data with items (``b.log`` a list),
        beside the last; where a check of the tests' that holds over no items reads it (``looped``:
        a loop, ``sorted``, ``map``, ``all``, ``x not in``, a subset check, a loop over
        ``b.cfg.items()``, ``h = b.log`` then a loop over ``h``: ``attribute_reads``) and it lost
        more items since that reading than calls were made that may change it (or than they gave
        back), the test fails unless the tests read it empty otherwise, before or after
        (``Session.unconfirmed``), as ``_emptied_unseen`` does for a value of the sample's. Why: each read of plain data is a new copy, never compared
        with the one before, so a forged ``Bank`` whose ``log`` was three -5s and ``[]`` after
        ``b.reset()`` passed ``len(b.log) == 3`` and then ``all(x > 0 for x in b.log)`` (1.0). What
        it costs, as there: a right log the tests clear and read so without ever seeing it empty
        scores 0 (``x not in b.log`` too, unless they put ``x`` in themselves). A reading compared with
        itself (``b.log == b.log``: ``self_compared``) is not kept at all: it sees nothing. ``asked``:
        the item of the tests' ``x not in b.log`` (``attribute_reads.not_in_item_here``); one they
        handed to a method of this value (``b.deposit(7)``) they expect gone, as ``__contains__`` does."""
        s = self._session
        if self._kin is None:
            return
        keys = s.plain_attributes.setdefault(self._key, {})
        key = keys.get(name)
        if key is None:
            key = keys[name] = -1 - sum(len(named) for named in s.plain_attributes.values())
        items = list(value)
        last = s.plain_reads.get(key)
        if looped and last is not None:
            before, at = last
            calls = s.changes(key, self._kin, at, taking=True)
            if len(before) - len(items) > calls and (not items or gained(before, items, s.handed_since(at))):
                returned = [item for given in s.returned_since(key, at) for item in returned_items(given)]
                if len(before) - len(items) > taken_back(before, items, returned, calls) \
                        and not any(s.handed_to(self._key, item) for item in asked):
                    s.unconfirmed.setdefault(key, set()).add(None)
        if not looped and not items:
            s.unconfirmed.pop(key, None)  # the tests read it empty: they expect it so
        s.plain_reads[key] = (items, s.asks)

    def _own_method(self, name: str) -> Remote:
        """The sample's bound ``name`` (a protocol method: ``__setattr__``, ``__enter__``) of this
        value, as ``getattr`` reads a method the tests call: a call of it is counted as one of a
        method of this value (``__call__``: its owner)."""
        method = self._session.ask("getattr", False, root=self._root, ref=self._ref, kin=self._kin, name=name)
        if not isinstance(method, Remote):
            raise TypeError(f"the sample's {name} is not callable")
        object.__setattr__(method, "_owner", self)
        object.__setattr__(method, "_attr", name)
        return method

    def __enter__(self) -> Any:
        """``with Timer() as t:`` of a sample's object: its own ``__enter__``'s answer (it raised
        TypeError: "does not support the context manager protocol", so a right one scored 0)."""
        entered = self._own_method("__enter__")()
        object.__setattr__(self, "_entered", self._session.asks)
        return entered

    def __exit__(self, kind: Any, exc: Any, traceback: Any) -> bool:
        """Its own ``__exit__``, for its effects, given the exception's class where one is sent as
        a standard name (a built-in exception), else None, and never the exception or traceback
        (the tests' objects). Its True suppresses only what ``suppressed.may_suppress`` allows
        (``with suppress_errors(): raise ValueError``), in a block that asked the sample nothing
        (the tests' code raising on a wrong answer, ``must(f())``, is no subject to suppress): an
        ``__exit__`` saying True swallowed the tests' failed assert or the solution's error inside
        the block."""
        quiet = self._entered is not None and self._session.asks == self._entered
        sent = kind if kind is None or getattr(kind, "__module__", None) == "builtins" else None
        answer = self._own_method("__exit__")(sent, None, None)
        return quiet and sent is not None and answer is True and may_suppress(kind, traceback)

    def __setattr__(self, name: str, value: Any) -> None:
        """``c.radius = 1``, ``a.next = b`` written in the tests: the sample's own ``__setattr__``
        called with it, as a method of the value called as a statement (``c.__setattr__('radius',
        1)``), so what may change with it is counted as for such a call (a value emptied by it is
        one call's change: ``Remote._emptied_unseen``). It raised TypeError, so a right linked list
        or class whose attribute the tests set scored 0. Only the tests' own code sets one: anywhere
        else (a library's, the harness's) it still raises."""
        caller = sys._getframe(1)
        if caller.f_code in BOUND_CODE and caller.f_back is not None:  # the tests' ``setattr(a, 'x', 1)``
            caller = caller.f_back
        if caller.f_code.co_filename not in TESTS_FILES or type(name) is not str:
            raise TypeError("values that live in the sample cannot be changed from the tests")
        self._session.touch([self._kin])
        self._session.call_on(self._key)
        self._own_method("__setattr__")(name, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``cache['a'] = 1`` written in the tests: the sample's own ``__setitem__``, counted as
        ``__setattr__`` is (a method of the value called as a statement); it raised TypeError, so a
        right mapping-like class (an LRU cache, a sparse vector) scored 0."""
        self._changed_by_tests("__setitem__")(key, value)

    def __delitem__(self, key: Any) -> None:
        """``del cache['a']`` written in the tests: its own ``__delitem__``, as ``__setitem__``."""
        self._changed_by_tests("__delitem__")(key)

    def _changed_by_tests(self, name: str) -> Any:
        """The sample's own method ``name`` (``__setitem__``...), once the caller is found to be the
        tests' own code and the change counted as a call on the value (``__setattr__``'s rule)."""
        caller = sys._getframe(2)
        if caller.f_code in BOUND_CODE and caller.f_back is not None:
            caller = caller.f_back
        if caller.f_code.co_filename not in TESTS_FILES:
            raise TypeError("values that live in the sample cannot be changed from the tests")
        self._session.touch([self._kin])
        self._session.call_on(self._key)
        return self._own_method(name)

    def __getitem__(self, key: Any) -> Any:
        if type(key) is int and isinstance(self._fresh_seen(), list) and self._counts_items() and self._base is None:
            self._container_data()  # whether it is a sequence (``_check_index``), asked once
        value = self._session.ask("getitem", self._data, root=self._root, ref=self._ref, kin=self._kin,
                                  key=self._session.arg(key))
        if type(key) is int:
            self._check_index(key, value)
            self._read_for_index()
        return value

    def _read_for_index(self) -> None:
        """After the first ``r[i]`` of a value whose ``len`` must agree with its items, never read
        whole before, read it whole (``_snapshot``), as ``len`` does (``_check_count``), and hold
        the items for the tests' next reading (``_keep``: a right heap whose ``__iter__`` pops
        still gives them to ``len(q)`` or a loop right after). Why: only whole readings told that
        the tests saw it with items, so a forged ``primes`` whose three items a method of its own
        took (``r.reset()``) passed ``y = r[0]``, ``r.reset()``, then ``all(is_prime(x) for x in
        r)`` (1.0) over no items; a loop over a value seen with more items than calls that may
        change it were made since fails now unless the tests see it emptied (``_emptied_unseen``).
        A reading that fails (a mapping by key with no ``__iter__``), holds too many items or none
        records nothing; an own iterator's items go to its next readings, as after ``len``. What it
        costs is ``len``'s: a right value read by index, cleared and then looped over, never seen
        empty, fails that loop. Not covered: a value that holds as many items as calls are made
        (one item, ``r.reset()``): the tests' ``r[0]`` pins no more of it."""
        if self._indexed or self._seen is not None or self._reader is not None or not self._counts_items():
            return
        object.__setattr__(self, "_indexed", True)
        try:
            answer = self._session.ask("iter", self._data, root=self._root, ref=self._ref, kin=self._kin, own=True)
        except SampleStopped:
            raise
        except Exception:  # noqa: BLE001 - not iterable, or too many items: its index stands alone
            if self._session.channel.dead is not None:
                raise self._session.channel.dead from None
            return
        if not (type(answer) is list and len(answer) == 2 and type(answer[0]) is bool and type(answer[1]) is list):
            raise TypeError("the sample's items came in no list")
        own, items = answer
        if own:  # its items are gone from it: its next readings take them
            object.__setattr__(self, "_reader", Reader(self._session, self._ref, self._data, self._root, own=True,
                                                       kin=self._kin))
            self._keep(items)
        elif items:
            self._keep(items, self._snapshot(items))

    def _check_index(self, key: int, value: Any) -> None:
        """AssertionError where ``r[key]`` of a list or tuple (a subclass, or a ``Sequence``: its
        data, ``_container_data``) is not item ``key`` of its last whole reading while nothing
        that may change it was called since (``_snapshot``). Why: only whole readings were
        compared, so a ``list`` subclass holding 3, 1, 2 whose ``__getitem__`` answered in sorted
        order passed ``sorted(r) == [1, 2, 3]`` and ``all(r[i] <= r[i + 1] for i in ...)`` (1.0).
        Only for sequences: a dict's or a graph's ``[0]`` is a key, not item 0 of its iteration,
        and other objects are asked nothing more."""
        seen = self._fresh_seen()
        if self._base not in (list, tuple) or not isinstance(seen, list):
            return
        if not -len(seen) <= key < len(seen) or not same_items([seen[key]], [value]):
            raise AssertionError(f"the sample's {self._type[:100]!r} gave another [{key}] than its last reading "
                                 f"({len(seen)} items), with nothing called that changes it between")

    def __len__(self) -> int:
        counted = self._counted
        if counted is not None and counted[1] == self._session.asks and isinstance(counted[0], list):
            if not counted[2] and self._snapshot(counted[0]):  # ``len(r) >= 0 and len(r) == 0``: this one sees it
                object.__setattr__(self, "_counted", (counted[0], counted[1], True))
            return len(counted[0])  # counted by an earlier ``len``, nothing of the sample's ran since
        value = self._session.ask("len", False, ref=self._ref)
        if type(value) is not int:
            raise TypeError("len() of a sample's value is not an int")
        reader = self._reader
        if reader is not None:  # its own iterator, which the tests read: the items read ahead count too
            ahead = len(reader.buffer)
            if self._counts_items():
                self._check_count(value)
            return value + ahead
        if counted is not None and counted[1] == self._session.asks - 1:  # its reading failed: it still would
            object.__setattr__(self, "_counted", (counted[0], self._session.asks, counted[2]))
        elif self._counts_items():  # ``list``/``sorted`` ask it first, for ``for x in sorted(r)`` too
            self._check_count(value, looped=looped_here() or subset_here())  # ``xs = list(r)`` checked vacuously
        return value

    def _counts_items(self) -> bool:
        """Whether its ``len`` must agree with its items, and its readings with each other
        (``_check_count``, ``_snapshot``): data the tests expect, or an instance the tests made of
        a class of the solution's they name (``Primes(5)``, ``_made``). Why the latter: a ``class
        Primes`` whose ``__len__`` said 5 over no items passed ``len(r) == 5`` and a loop over
        ``r = Primes(5)`` (1.0). Other objects of the sample's (a method's or attribute's object,
        ``Solution()`` itself) keep their own ``len``, as Python does."""
        return self._data or self._made

    def _check_count(self, length: int, looped: bool = False) -> None:
        """AssertionError where the items of a value the tests expect data from number other than
        its ``len``. Why: a ``list`` subclass whose ``__len__`` said 3 over no items passed ``assert
        len(f(3)) == 3 and all(x == 1 for x in f(3))``; built-in data never disagrees so. Not
        checked where the value is no iterable (or holds too many items to send): ``len`` is all
        there is; where reading them stops past ``MAX_ITEMS`` (a ``__getitem__`` that answers every
        index, which iteration falls back to), they are more than a smaller ``len``. The items read,
        or the failure to read them, are what the tests' next iteration of it gets when no request
        reaches the sample between (``_keep``), and after it, until a call that may change it
        (``_snapshot``); an own iterator's, which the reading took from it, its next readings'.
        ``looped``: ``len`` was asked by a builtin whose answer a loop of the tests' goes over
        (``shrinking.looped_here``), so the reading is that loop's."""
        try:
            answer = self._session.ask("iter", self._data, root=self._root, ref=self._ref, kin=self._kin, own=True)
            if not (type(answer) is list and len(answer) == 2 and type(answer[0]) is bool and type(answer[1]) is list):
                raise TypeError("the sample's items came in no list")
            own, items = answer
        except SampleStopped:
            raise
        except OverflowError as exc:
            if length > MAX_ITEMS:
                self._keep(exc)
                return
            own, items = False, range(MAX_ITEMS + 1)
        except Exception as exc:  # noqa: BLE001 - not iterable: its len stands alone
            if self._session.channel.dead is not None:
                raise self._session.channel.dead from None
            self._keep(exc, self._snapshot(exc, length))
            return
        if len(items) != length:
            raise AssertionError(f"len() of the sample's {self._type[:100]!r} says {length}, its items are {len(items)}")
        if own is True and self._reader is None:  # its items are gone from it: its next readings take them
            object.__setattr__(self, "_reader", Reader(self._session, self._ref, self._data, self._root, own=True,
                                                       kin=self._kin))
        recorded = True
        if own is False and isinstance(items, list):
            recorded = self._snapshot(items, looped=looped)
        self._keep(items, recorded)

    def _snapshot(self, items: list[Any] | Exception, length: int | None = None, looped: bool = False,
                  asked: tuple[Any, ...] = ()) -> bool:
        """AssertionError where ``items``, all of it the sample gave for one reading (or what
        reading it raised), differ from what its last whole reading gave while no call that reaches its family
        (``Session.touch``) was made between; else they are what the next reading must give. Why:
        ``len``'s items are held only while no request reaches the sample (``_keep``), so one whose
        ``__iter__`` gave 4, 6, 8 to ``len`` and nothing once another request came
        (``primes(5)``, ``print(r)``) passed ``assert len(r) == 3`` and then ``all(is_prime(x) for
        x in r)``, as did one whose reading for ``len`` raised TypeError (so ``len`` stood alone).
        An honest value changes only when something changes it: a method of its own or
        of the object it came from called as the tests call one for its effect (``q.push(2)``,
        ``g.remove(3)`` before ``nodes``, read from ``g``, is read again: ``object_use.changer_roots``),
        or a call it, or one of its family, is passed to, or a method called for its value of its own
        or of an object a call made with it (``assert s.pop() == 3``, ``assert shop.sell() == 'b'``
        after ``shop = Shop(s)``: such right stacks scored 0 once ``len(s)`` or ``list(s)`` came
        before), or a function of the solution's the tests call as a statement (``register('a')``
        changes ``r = registry()`` through global state: ``object_use.effect_call_names``); after
        those last three it may not lose more items than such calls were made where the tests may
        read it vacuously (``_shrunk_softly``). Not covered: a forged value emptied by a method the
        tests call for its effect on an object of its family, or by a call it is passed to, still
        passes, except where a loop of the tests' reads it emptied (``_emptied_unseen``; ``looped``:
        this reading is one; ``asked``: the item of the ``x not in r`` that made it). ``length``: what
        ``len`` said of it where reading its items failed. False where it keeps no reading: one the
        tests compare with another of the same value (``list(r) == list(r)``: ``self_compared``) or
        count only to compare the count with a constant any count answers alike (``len(r) >= 0``:
        ``vacuous_counts``) sees nothing of it (``_keep`` holds such items for the next reading to
        take as its own)."""
        if not looped and (self_compared_above() or counted_vacuously_above()):
            return False  # no reading of the tests'
        s = self._session
        seen = self._fresh_seen()
        if seen is not None and not isinstance(items, Exception) and (
                isinstance(seen, Exception) or not same_items(seen, items)):
            before = "none (its reading failed)" if isinstance(seen, Exception) else len(seen)
            raise AssertionError(f"the sample's {self._type[:100]!r} gave {len(items)} items after {before}, "
                                 "with nothing called that changes it between")
        if isinstance(items, list) and not items:
            self._true_over_nothing()
        if seen is None and not isinstance(items, Exception):
            self._shrunk_softly(items)
            if looped:
                self._emptied_unseen(items, asked)
        if not looped and isinstance(items, list) and (not items or seen is not None):
            s.unconfirmed.pop(self._key, None)  # the tests read it whole: empty, or as the loop did
        object.__setattr__(self, "_seen", (items, s.asks, length if isinstance(items, Exception) else len(items)))
        return True

    def _shrunk_softly(self, items: list[Any]) -> None:
        """AssertionError where a reading of ``items`` lost more items since its last whole
        reading than calls were made that may change it without reaching its family (a method
        of its own, or of an object made with it, called for its value; a function of the
        solution's called as a statement: ``Session.soft_changes``), or than they gave back of
        the items lost (``shrinking.taken_back``: ``q.drain()``), and a check of the tests' may
        read it vacuously (``vacuous_reads.read_vacuously``: a loop, ``all``, a method of the
        tests'). Why: ``_snapshot`` lets such calls change a value, for right stacks and queues
        (``assert s.pop() == 3`` then ``list(s) == [1, 2]``), so a forged value giving 4, 4, 4
        to ``len`` and nothing after ``assert r.total() == 12``, ``assert box.ok()`` (``box =
        Box(r)``) or ``warm(2)`` passed ``len(r) == 3`` and then ``all(is_prime(x) for x in r)``.
        What it costs: a right value that loses items to such a call that returns none of them
        (``assert q.clear_all() == 2``) and then is read in a loop scores 0 there; compared whole
        (``list(q) == []``) it passes."""
        seen = self._seen
        s = self._session
        if seen is None or seen[2] is None or self._kin is None or not s.unchanged(self._kin, seen[1]):
            return  # never read whole, or a call that reaches its family may have changed it
        lost = seen[2] - len(items)
        if lost <= 0:
            return
        may = self._may_lose(items, s.soft_changes(self._key, seen[1]))
        if lost > may and s.reads_vacuously(self):
            raise AssertionError(f"the sample's {self._type[:100]!r} gave {len(items)} items after {seen[2]}, with "
                                 f"calls between that may take {may}")

    def _emptied_unseen(self, items: list[Any], asked: tuple[Any, ...] = (), view: bool = False) -> None:
        """Where a loop of the tests' reads this value as ``items``, empty or holding an item
        neither its last whole reading nor the tests' calls since handed it (``shrinking.gained``),
        while that reading gave more items than calls were made since that may take one (``Session.changes``
        with ``taking``: one handed something of the tests'; ``r.reset()`` or ``show(r)`` take only what
        they return, ``_may_lose``), the test running (or
        the next one, after a step that is no test) fails unless a whole reading of the tests'
        sees it so, before or after (``len(q) == 0``, ``list(q) == []``, ``not q``, ``len(r) == 1``:
        ``Session.unconfirmed``, ``harness._run_steps``). Why: ``_snapshot`` lets such calls
        change a value as they like, so a forged value giving 4, 4, 4 to ``len`` and nothing after
        ``show(r)`` or ``r.reset()`` passed ``len(r) == 3`` and then ``all(is_prime(x) for x in
        r)`` (``shrinking`` module doc); a right value the tests empty (``q.clear()``) they see
        empty, before or after their loop over it; left one new item (``self.xs = [2]`` after 4, 4,
        4) it passed the loop just as well (1.0); ``x not in r`` is such a loop (``__contains__``).
        What it costs: a test that empties a right value that way (or leaves it items it never had,
        from no argument of theirs), loops over it and never reads it whole then scores 0. A loop
        over an empty view of it (``for k, v in d.items()`` of a class of the sample's: ``_view_of``)
        reads it so too (``view``: the call that made the view took none of its items; a
        ``Mapping``'s view is ``_container_data``'s). A ``Mapping``'s views the tests'
        ``zip`` reads in a loop (``zip(d.keys(), d.values())``) are such a loop's reading too
        (``zipped_views``). Not covered: a value left items it had (4, 2, 6 to 2)."""
        seen = self._seen
        view_of = self._view_of
        if seen is None and not items and view_of is not None:  # an empty ``d.items()``: d, read by this loop
            view_of._emptied_unseen(items, asked, view=True)
            return
        if seen is None or seen[2] is None or self._kin is None:
            return
        s = self._session
        lost, calls = seen[2] - len(items), s.changes(self._key, self._kin, seen[1], taking=True) - view
        if lost <= calls:  # first, as it is cheap: a loop after each ``q.push(i)`` comes here each time
            return
        if items and (not isinstance(seen[0], list) or not gained(seen[0], items, s.handed_since(seen[1]))):
            return  # left items it had (``g.remove(2)`` before a loop over the edges), or was given
        said = s.said_empty.get(self._key)
        if not items and said is not None and said > seen[1] and s.changes(self._key, self._kin, said) == 0:
            return  # ``assert s.is_empty()`` since its last change: the tests expect it empty
        if lost > self._may_lose(items, calls) and not any(s.handed_to(self._key, item) for item in asked):
            s.unconfirmed.setdefault(self._key, set()).add(None)

    def _may_lose(self, items: list[Any], calls: int) -> int:
        """How many items it may have lost from its last whole reading to ``items`` through
        ``calls`` calls: one each, or those of the lost items its own methods' calls gave back
        (``shrinking.taken_back``)."""
        seen = self._seen
        if seen is None:
            return calls
        returned = [item for value in self._session.returned_since(self._key, seen[1])
                    for item in returned_items(value)]
        return taken_back(seen[0] if isinstance(seen[0], list) else [], items, returned, calls)

    def _fresh_seen(self) -> list[Any] | Exception | None:
        """What its last whole reading gave (``_snapshot``), while no call that may change it came since."""
        seen = self._seen
        s = self._session
        if seen is None or self._kin is None or not s.unchanged(self._kin, seen[1]) \
                or s.soft_changes(self._key, seen[1]):
            return None
        return seen[0]

    def _keep(self, items: list[Any] | Exception, recorded: bool = True) -> None:
        """Hold the items ``len`` read (or what reading them raised) for the tests' next iteration
        of this value (and its ``len`` again), while no other request reaches the sample. Why:
        Python's ``len`` reads no items, but ``_check_count`` does, so an object that is its own
        iterator (``__len__`` 3, ``__next__`` giving 2, 2, 2) was empty for the tests after ``assert
        len(r) == 3``, and one whose ``__iter__`` gave its 3 items once and none after (or raised
        TypeError once, as if it had none to give) passed ``assert len(r) == 3 and
        all(is_prime(x) for x in r)``: the items counted must be the ones the tests check. Nothing
        of the sample's ran between, so an honest value's items (and length) are these.
        ``recorded``: ``_snapshot`` kept them as the tests' reading; where it did not (``len(r) >=
        0``, ``len(r) == len(list(r))``: that reading saw nothing), the reading that takes them is
        the tests' (``_iterate``, ``__len__``). Why: a forged ``primes`` emptied by ``r.reset()``
        passed ``len(r) == len(list(r))`` and then ``all(is_prime(x) for x in r)`` (1.0): the loop
        took the empty items ``list(r)``'s ``len`` held, never a reading of its own."""
        if not isinstance(items, (list, Exception)):
            return
        if self._reader is not None:  # the tests' reading goes on there
            self._reader.read_ahead(items)
        else:
            object.__setattr__(self, "_counted", (items, self._session.asks, recorded))

    def _unread(self) -> tuple[list[Any] | Exception, bool] | None:
        """What ``_keep`` holds, and whether it was kept as a reading, when no request has reached
        the sample since; dropped either way (an iteration takes it, as it would take an
        iterator's items)."""
        counted = self._counted
        object.__setattr__(self, "_counted", None)
        if counted is None or counted[1] != self._session.asks:
            return None
        return counted[0], counted[2]

    def __iter__(self) -> Any:
        """Python's iteration; a loop of the tests', a subset check of theirs (``set(r) <=
        allowed``: ``subset_reads``) or a builtin's default standing in for its items
        (``min(r, default=2)``: ``defaulted_reads``) is a check over each item (``_iterate``'s ``looped``)."""
        return self._iterate(looped_here() or subset_here() or defaulted_here())

    def __contains__(self, item: Any) -> bool:
        """Python's ``in`` over its items (each ``is`` or ``==`` it), as Python's fallback without
        ``__contains__`` was (the sample's own ``__contains__`` is asked nothing, as before). ``x
        not in r`` of the tests' reads it as their loop does (``_emptied_unseen``), unless they
        handed ``x`` to a method of its own or to the call that made it (``Session.handed_to``:
        ``b.add(1)`` or ``Bag([1])``, then ``b.clear()``, then ``1 not in b``). Why: it holds over
        no items, so a forged ``primes`` giving 4, 4, 4 to ``len`` and nothing after ``r.reset()``
        or ``show(r)`` passed ``len(r) == 3`` and then ``4 not in r`` (1.0); an item the tests put
        in themselves they expect gone."""
        return any(x is item or x == item for x in self._iterate(not_in_here(), (item,)))

    def _iterate(self, looped: bool, asked: tuple[Any, ...] = ()) -> Any:
        """``__iter__``: ``looped``, a check over each item of the tests' reads it (``_snapshot``'s
        ``looped``); ``asked``: the item ``x not in r`` asks of it (``__contains__``)."""
        kept = self._unread()
        if kept is not None:
            counted, recorded = kept
            if isinstance(counted, Exception):
                raise counted
            if not recorded:  # ``len(r) >= 0`` saw nothing of them: this reading is the tests'
                self._snapshot(counted, looped=looped, asked=asked)
            return iter(counted)
        if self._reader is not None:  # its own iterator: the tests go on where they stopped
            return self._reader
        s = self._session
        answer = s.ask("iter", self._data, root=self._root, ref=self._ref, kin=self._kin, lazy=True)
        if answer is True:  # it is its own iterator (a generator)
            reader = Reader(s, self._ref, self._data, self._root, own=True, kin=self._kin)
            object.__setattr__(self, "_reader", reader)
            if looped and self._asserted_unchanged() and reader.empty():
                raise AssertionError(f"the sample's {self._type[:100]!r} the tests asserted true gave their loop "
                                     "no items")
            return reader
        if isinstance(answer, Remote):  # a fresh iterator over it, the tests' alone
            if not self._counts_items():
                return Reader(s, answer._ref, self._data, self._root, own=False, kin=self._kin)
            seen = self._fresh_seen()
            if isinstance(seen, Exception):  # its reading failed, and nothing changed it since
                raise seen
            whole = functools.partial(self._snapshot, looped=True, asked=asked) if looped else self._snapshot
            return Reader(s, answer._ref, self._data, self._root, own=False, kin=self._kin,
                          whole=whole, expect=seen)
        raise TypeError("iter() of a sample's value gave no iterator")

    def _asserted_unchanged(self) -> bool:
        """Whether an ``assert`` of the tests' checked its ``bool`` true (``asserted_truths``) with
        no call since that may change it. Why: a generator is true whatever it yields, so a forged
        one yielding nothing passed ``assert r and all(is_prime(x) for x in r)`` (1.0); the tests
        that assert it true expect its items, and their loop over none is vacuous. One they pass
        to a call (``show(r)``) may be used up there, as Python's would be."""
        at = self._asserted
        if at is None:
            return False
        s = self._session
        return (s.changes(self._key, self._kin, at) if self._kin is not None else s.soft_changes(self._key, at)) == 0

    def __next__(self) -> Any:
        """The next item of an iterator the solution returned (``next(f(x))`` of a generator;
        ``for`` and ``list`` go through ``__iter__``). Its end is a ``RemoteError``, never
        StopIteration, which would end a ``map`` of the tests' early (``EXCEPTIONS``). Why: a
        right generator failed ``assert next(gen(3)) == 0`` ("'Remote' object is not an iterator").
        After ``len`` it is the first item ``len`` counted (``_keep``), which the sample has given."""
        object.__setattr__(self, "_asserted", None)  # an item taken: a loop after may rightly get none
        kept = self._unread()
        if kept is not None and isinstance(kept[0], list) and kept[0]:
            object.__setattr__(self, "_counted", (kept[0][1:], self._session.asks, kept[1]))
            return kept[0][0]
        if self._reader is not None and self._reader.buffer:  # read ahead by the tests' iteration
            return self._reader.take()
        return self._session.ask("next", self._data, root=self._root, ref=self._ref, kin=self._kin)

    def __bool__(self) -> bool:
        """Its own ``bool``; where that says yes of a value whose items count (``_counts_items``),
        AssertionError if its last whole reading, nothing changed since, gave no items, else the
        yes is held (``Session.truthy``) for the next reading of the tests' to check
        (``_true_over_nothing``). Why: a value whose ``__bool__`` (or ``__len__``) said True (3)
        over no items passed ``assert r`` (or ``r and ...``) and then ``all(is_prime(x) for x in
        r)`` (1.0): built-in data is true only with items. Why not read an item here: Python's
        ``bool`` never iterates, so a right heap whose ``__iter__`` pops (``heappop``) lost an item
        to ``assert q``, and a mapping with ``__len__`` and ``__getitem__`` but no ``__iter__``
        raised KeyError for item 0 (both scored 0). A value whose ``bool`` says no keeps it (only
        an empty answer gains from that, which ``return []`` gives)."""
        s = self._session
        truth = s.ask("bool", False, ref=self._ref) is True
        if not self._counts_items():
            return truth
        if not truth:  # ``assert not q``: the tests see it empty, before a loop over it too
            s.unconfirmed.pop(self._key, None)
            s.truthy.pop(self._key, None)
            s.said_empty[self._key] = s.asks  # as ``q.is_empty()`` (``_emptied_unseen``)
            return truth
        seen = self._fresh_seen()
        if isinstance(seen, list) and not seen:
            raise AssertionError(f"bool() of the sample's {self._type[:100]!r} says true over no items")
        s.truthy[self._key] = s.asks
        object.__setattr__(self, "_asserted", s.asks if asserted_here() else None)
        return truth

    def _true_over_nothing(self) -> None:
        """AssertionError where this reading gave no items while the last ``bool`` of it said
        true and no call that may change it came since (``Session.changes``, ``__bool__``).
        Its own iterator (a generator) never comes here: ``__iter__`` gives it no ``whole``."""
        s = self._session
        at = s.truthy.get(self._key)
        if at is None:
            return
        since = s.changes(self._key, self._kin, at) if self._kin is not None else s.soft_changes(self._key, at)
        if since == 0:
            raise AssertionError(f"bool() of the sample's {self._type[:100]!r} said true over no items")

    def __str__(self) -> str:
        value = self._session.ask("str", False, ref=self._ref)
        if type(value) is not str:
            raise TypeError("str() of a sample's value is not a str")
        return value

    def __eq__(self, other: object) -> Any:
        """Itself; another of the sample's values as the sample's own ``==`` says
        (``_compare``); a number or str of the tests' as ``_equals_plain`` says. False, not
        NotImplemented, against other built-in data, which never compares with it: NotImplemented
        is truthy, so ``assert f(x).__eq__("abc")`` held for any object; other types (numpy
        arrays, ``pytest.approx``) still get their reflected turn."""
        if self is other:
            return True
        if isinstance(other, Remote):
            return self._compare("==", other)
        array = self._elementwise(other)
        if array is not None:
            return array == other
        if type(other) in _NUMBERS or type(other) is str:
            return self._equals_plain(other)  # type: ignore[arg-type]
        if type(other) in _CONTAINERS:
            items = self._container_data()
            return items is not None and bool(items == other)
        if type(other) in _SET_VIEWS:  # ``f() == {'a': 1}.keys()``: its items as a set, as Python compares a view
            items = self._container_data()
            return type(items) in (set, frozenset) and bool(items == other)
        return False if type(other) in _PLAIN_TYPES else NotImplemented

    def _container_data(self, looped: bool = False) -> Any:
        """Its items as the built-in container its class derives from (``class D(dict)``: a dict of
        them), or None where it derives from none or they are no plain data. Why: a right
        ``freq(s)`` returning a ``dict`` subclass of its own failed ``freq('aab') == {'a': 2, 'b':
        1}`` (never equal to the tests' dict) and ``.get('a') == 2`` (``DATA_QUERIES``), as did a
        ``list`` subclass against a list. Sound: the comparison and the query run here, on plain
        data the sample sent without seeing the tests' value, as if it had returned that data; its
        own ``__eq__`` or ``get``, which would see it, never runs (stricter than Python where a class
        overrides them). A container of no built-in base stands for the data it holds
        (``server._like_data``): a ``UserDict`` or other ``collections.abc.Mapping`` a dict, a
        ``UserList`` or other sequence a list, a set ABC's a set, a ``UserString`` its str (whose
        yes/no methods then answer, ``DATA_PREDICATES``); an exact ``UserDict``, ``UserList`` or
        ``UserString`` comes over as the trainer's own (``standard_values.REBUILT``). Why: a right
        answer of one failed ``== {'a': 2}``, ``.get``, ``.count`` and ``.startswith``. Its items are
        one reading of it (``_snapshot``): a ``Mapping`` whose ``__iter__`` gave 3 keys to ``len``
        and none after passed ``len(d) == 3`` and a loop over ``d.values()`` (``_MAPPING_VIEWS``).
        ``looped``: a loop of the tests' goes over them (``shrinking.view_looped_here``), a reading
        ``_snapshot`` reads as that loop's."""
        items = self._session.ask("data", False, ref=self._ref)
        if isinstance(items, Remote) and items._type in _BUILT:
            items = self._items_of(items)
        object.__setattr__(self, "_base", type(items))
        if type(items) in (dict, list, tuple):
            self._snapshot(list(items), looped=looped)
        elif type(items) in (set, frozenset):  # no order to compare: as many as its last reading gave
            seen = self._fresh_seen()
            if seen is not None and (isinstance(seen, Exception) or len(seen) != len(items)):
                raise AssertionError(f"the sample's {self._type[:100]!r} gave {len(items)} items after another "
                                     "reading, with nothing called that changes it between")
            if seen is None:
                self._shrunk_softly(list(items))
        return items if type(items) in _CONTAINERS or type(items) is str else None

    def _items_of(self, copy: Remote) -> Any:
        """``copy``, the sample's ``dict``/``list``/``tuple``/``set``/``frozenset`` of its items that
        came back as no plain data (``[np.int64(2), Fraction(3)]``, ``{'a': np.int64(2)}``, items
        of an ``int`` subclass), built here of its items as a reading gives them (a number, a rebuilt
        ``Fraction``, a value of the sample's; a dict's values asked by its keys); None where they
        come in no list, or as fewer distinct keys or members here than there. Why: such right
        answers failed ``== [2, 3, 5, 7]`` or ``== {'a': 2}``, which Python holds (and ``r[i] == x``
        passed). Sound: each item is compared here as ``r[i] == x`` is (``_equals_plain``: its own
        ``__eq__`` never runs), and two of its keys equal here make no one."""
        s = self._session
        read = s.ask("iter", self._data, root=self._root, ref=copy._ref, kin=self._kin)
        if type(read) is not list:
            return None
        kind = _BUILT[copy._type]
        if kind is dict:
            built: Any = {key: s.ask("getitem", self._data, root=self._root, ref=copy._ref, kin=self._kin,
                                     key=s.arg(key)) for key in read}
        else:
            built = kind(read)
        return built if len(built) == len(read) else None

    def _plain_answer(self, text: bool = False) -> dict[str, Any]:
        """The sample's plain values of it, from one request kept until the next (``server._plain``):
        ``int``/``float``/``str``, its own conversions its ``==`` agrees with; ``number``, the one
        number it is (the int, else the float; the float where both came and differ); ``near``,
        that number, else its own float where its ``==`` disagrees (``Frac(1, 3)``: for orderings
        and operators, never ``==``); ``order``, the orderings it answers at ``near`` (as the
        number does there, where it is exact); ``ops``/``rops``, the binary
        operators its type defines. Why one request for all: a conversion that counts (``__int__``
        giving 3, then 7) answered ``x < 5`` and ``x >= 5`` (or ``x == 3`` and ``x == 3.5``) each
        by a new number; from one answer they are one number's. ``text``: its ``str()`` too, asked
        only against a str of the tests' (a large object's text crossed for every number). Malformed
        parts are absent."""
        s = self._session
        kept = self._plain
        if kept is not None and kept[1] == s.asks and (kept[2] or not text):
            return kept[0]
        answer = s.ask("plain", False, ref=self._ref, text=text)
        plain: dict[str, Any] = {}
        if type(answer) is dict:
            for name, kind in (("int", int), ("float", float), ("str", str), ("approx", float)):
                if type(answer.get(name)) is kind:
                    plain[name] = answer[name]
            number = plain.get("int")
            if "float" in plain and (number is None or plain["float"] != number):
                number = plain["float"]
            plain["number"] = number
            plain["near"] = number if number is not None else plain.get("approx")
            for name, known in (("order", _ORDER), ("ops", _NUMBER_OPS), ("rops", _NUMBER_OPS)):
                got = answer.get(name)
                plain[name] = frozenset(h for h in got if type(h) is str and h in known) if type(got) is list else ()
        if kept is not None and kept[1] == s.asks - 1:  # its number came a request ago: it stays the one
            plain = {**kept[0], **({"str": plain["str"]} if "str" in plain else {})}
        object.__setattr__(self, "_plain", (plain, s.asks, text))
        return plain

    def _equals_plain(self, other: int | float | str) -> bool:
        """Whether it equals ``other``, a number or str of the tests': its number
        (``_plain_answer``) equals ``other`` (a str: its own ``str()`` is ``other``), compared
        here. Why: ``add(Num(1), Num(2)) == 3`` of a ``Num`` whose ``__eq__`` compares with an int
        scored 0, and ``Num(1) == True`` too. Sound: ``other`` never reaches the sample, so an
        object equal to everything passes only where its conversion gives the tests' value, as a
        function returning that constant would; the answer is kept until the next request, so
        ``x in [1, 2, 3]`` asks once (each guess is not a new one), and its int and float are one
        number. Stricter than Python: an object with no such conversion, or one whose ``__eq__``
        says yes to values its conversion does not give, equals none of them."""
        plain = self._plain_answer(text=type(other) is str)
        if type(other) is str:
            return "str" in plain and plain["str"] == other
        number = plain.get("number")
        return number is not None and bool(number == other)

    def _number_for(self, how: str, other: object, reflected: bool = False) -> int | float:
        """Its number (``_plain_answer``'s ``near``) for ``how`` with a number of the tests':
        TypeError where it has none, or (an ordering) answers ``how`` at its own number otherwise than the number
        does, or (an operator) its type defines no such method (``reflected``: ``__radd__``...),
        as Python raises."""
        plain = self._plain_answer()
        number = plain.get("near")
        allowed = plain.get("order", ()) if how in _ORDER else plain.get("rops" if reflected else "ops", ())
        if number is None or how not in allowed:
            raise TypeError(f"{how!r} of the sample's {self._type[:100]!r} with a {type(other).__name__}: it has no "
                            "int() or float() of its own answering that operator")
        return number

    def _order(self, how: str, other: object) -> Any:
        """``self <how> other``: against the tests' number, its own number compared here
        (``_plain_answer``); against another of the sample's values, as the sample compares them.
        Why: ``Num(3) < 5`` raised TypeError, so right solutions scored 0. Sound: the number is
        one per request, made without seeing ``other``, so an object whose every comparison
        agrees cannot pass both ``x < 5`` and ``x >= 5``."""
        if isinstance(other, Remote):
            return self._compare(how, other)
        if isinstance(other, (int, float)) and type(other) in _NUMBERS:
            return _ORDER[how](self._number_for(how, other), other)
        return NotImplemented

    def _elementwise(self, other: object) -> Any:
        """A numpy array of this value's items, read here, where it is a numpy ``ndarray`` of the
        sample's and ``other`` a number, list or tuple of the tests' (``==``/``!=`` give an array
        then, as numpy's do); else None. Why: ``(f(3) == [1, 2, 3]).all()``, ``np.all(f(3) == 1)``
        of a right ``f`` returning an array got one bool (its items never equal a list's as a
        container's are), and ``.all()`` of it raised: 0.0. Sound: the array is the trainer's, built
        from the items the sample sent (``np.array`` of it, as ``f(3) - expected`` reads it), and
        an empty one compared with items fails as ``numpy_checks.empty_array`` says."""
        if self._type != "ndarray" or not (type(other) in _NUMBERS or type(other) in (list, tuple)):
            return None
        try:
            import numpy
        except ImportError:
            return None
        from polyrl.sandbox.numpy_checks import empty_array

        local = numpy.array(self)
        if local.dtype == object:  # items numpy could not read as numbers or text: none of this
            return None
        return empty_array(local)

    def __ne__(self, other: object) -> Any:
        if isinstance(other, Remote) and self is not other:
            return self._compare("!=", other)
        array = self._elementwise(other)
        if array is not None:
            return array != other
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __lt__(self, other: object) -> Any:
        return self._order("<", other)

    def __le__(self, other: object) -> Any:
        return self._order("<=", other)

    def __gt__(self, other: object) -> Any:
        return self._order(">", other)

    def __ge__(self, other: object) -> Any:
        return self._order(">=", other)

    def _compare(self, how: str, other: Remote) -> bool:
        """``self <how> other`` where both live in the sample: run there, as Python runs it (the
        sample's ``__eq__``/``__lt__``, reflected, identity), its answer a real bool (numpy's
        ``np.bool_`` or a 0-d bool array made one there: a numpy-based ``__eq__`` scored 0). Why: a
        ``@dataclass Point`` of the sample's failed ``assert mid(p, q) == Point(1, 1)`` (two
        objects of the sample's compared by identity), as did ``in``, ``index``, ``count`` and
        ``sorted`` over them, where ``python tests.py`` passes. Sound: both operands are the
        sample's, so an ``__eq__`` that always agrees passes only what it passes in Python; a
        value of the tests' (a literal, a list, an object of theirs) never reaches it (above).
        ``==``/``!=`` of two that each equal a number of the tests' (``_plain_answer``) compares
        those numbers, as they compare with the tests' and hash (``__hash__``). Why: eight objects
        equal to 2, each equal only to itself among them, passed ``len(set(r)) == 8`` and ``r[i] !=
        r[j]`` beside ``all(is_prime(x) for x in r)`` as a forged ``primes(20)`` (1.0)."""
        s = self._session
        if other._session is not s:
            raise TypeError("a value from another sample")
        if how in ("==", "!="):
            mine, theirs = self._plain_answer().get("number"), other._plain_answer().get("number")
            if mine is not None and theirs is not None:
                return bool(mine == theirs) is (how == "==")
        answer = s.ask("compare", False, ref=self._ref, other=other._ref, how=how)
        if type(answer) is not bool:
            raise TypeError(f"the sample's {how} answered no bool")
        return answer

    def _arith(self, how: str, other: object, reflected: bool = False) -> Any:
        """``self <how> other`` (``other <how> self`` where ``reflected``). Two of the sample's
        values: run there, as Python runs it (the sample's ``__add__``, ``__radd__``...), the
        result another of its values or plain data. Why: ``Frac(1, 2) + Frac(1, 2) == Frac(1, 1)``
        raised TypeError here, so a right solution scored 0. Sound as ``_compare``: only two of
        the sample's values meet. A number of the tests': computed here on its own number
        (``_plain_answer``), the tests' value never sent (``abs(area(2) - 12.57) < 1e-3`` would
        pass an object whose ``__sub__`` gives 0), where its type defines the operator; ``x + 0``
        and ``0 + x`` are ``x`` itself (``sum`` starts at 0), so ``sum(fracs) == Frac(1, 1)``
        adds the sample's values there. Why: ``Frac(1, 2) + 1`` and ``sum(fracs)`` raised
        TypeError. The result is a number, not an object of its type (``(Frac(1, 2) + 1).n``
        fails). A str, list or tuple of the tests' added to one whose data is of that type (a
        ``UserString`` subclass, ``_container_data``) is joined here with that data, as if the
        sample had returned it: ``w + 'x'`` raised TypeError (a right answer scored 0); its own
        ``__add__`` never sees the tests' value, and the result is plain data, not its type."""
        if isinstance(other, Remote):
            if other._session is not self._session:
                raise TypeError("a value from another sample")
            if reflected:
                return NotImplemented
            return self._session.ask("arith", self._data and other._data, ref=self._ref, other=other._ref, how=how,
                                     kin=self._session.join([self._kin, other._kin]))
        if how == "+" and type(other) in _CONCATENATED:
            items = self._container_data()
            if type(items) is not type(other):
                return NotImplemented
            return operator.add(other, items) if reflected else operator.add(items, other)
        if type(other) not in _NUMBERS or how not in _NUMBER_OPS:
            return NotImplemented
        if how == "+" and type(other) is int and other == 0:
            if how in self._plain_answer().get("rops" if reflected else "ops", ()):
                return self  # the sum's start: adding 0 to it is itself
        number = self._number_for(how, other, reflected)
        op = _NUMBER_OPS[how]
        return op(other, number) if reflected else op(number, other)

    def __add__(self, other: object) -> Any:
        return self._arith("+", other)

    def __sub__(self, other: object) -> Any:
        return self._arith("-", other)

    def __mul__(self, other: object) -> Any:
        return self._arith("*", other)

    def __truediv__(self, other: object) -> Any:
        return self._arith("/", other)

    def __floordiv__(self, other: object) -> Any:
        return self._arith("//", other)

    def __mod__(self, other: object) -> Any:
        return self._arith("%", other)

    def __pow__(self, other: object) -> Any:
        return self._arith("**", other)

    def __matmul__(self, other: object) -> Any:
        return self._arith("@", other)

    def __and__(self, other: object) -> Any:
        return self._arith("&", other)

    def __or__(self, other: object) -> Any:
        return self._arith("|", other)

    def __xor__(self, other: object) -> Any:
        return self._arith("^", other)

    def __radd__(self, other: object) -> Any:
        return self._arith("+", other, reflected=True)

    def __rsub__(self, other: object) -> Any:
        return self._arith("-", other, reflected=True)

    def __rmul__(self, other: object) -> Any:
        return self._arith("*", other, reflected=True)

    def __rtruediv__(self, other: object) -> Any:
        return self._arith("/", other, reflected=True)

    def __rfloordiv__(self, other: object) -> Any:
        return self._arith("//", other, reflected=True)

    def __rmod__(self, other: object) -> Any:
        return self._arith("%", other, reflected=True)

    def __rpow__(self, other: object) -> Any:
        return self._arith("**", other, reflected=True)

    def __rand__(self, other: object) -> Any:
        return self._arith("&", other, reflected=True)

    def __ror__(self, other: object) -> Any:
        return self._arith("|", other, reflected=True)

    def __rxor__(self, other: object) -> Any:
        return self._arith("^", other, reflected=True)

    def _unary(self, how: str) -> Any:
        """``-x``, ``+x``, ``~x``, ``abs(x)``: run in the sample by its own ``__neg__``..., the
        result another of its values or plain data. Why: ``-Frac(1, 2) == Frac(-1, 2)`` and
        ``abs(x)`` raised TypeError here, so right solutions scored 0. Sound: no value of the
        tests' reaches the sample, so what it answers is what a method of its would return. It
        must be ``how`` of the number its comparisons use, where it has one (``number_results``:
        objects equal to 4, 6, 8 whose ``__abs__`` gave 2 passed an ``is_prime`` doing ``abs(n)``)."""
        number = self._plain_answer().get("number")
        result = self._session.ask("unary", self._data, root=self._root, ref=self._ref, kin=self._kin, how=how)
        if not unary_agrees(how, number, _number_of(result)):
            raise TypeError(f"{how} of the sample's {self._type[:100]!r} is not {how} of the number it equals ({number!r})")
        return result

    def __neg__(self) -> Any:
        return self._unary("-")

    def __pos__(self) -> Any:
        return self._unary("+")

    def __invert__(self) -> Any:
        return self._unary("~")

    def __abs__(self) -> Any:
        return self._unary("abs")

    def __round__(self, ndigits: int | None = None) -> Any:
        """``round(x)``, ``round(x, 2)``: its own ``__round__``'s answer. Only an int (or None)
        of the tests' goes over, the number of digits, never a value they compare with."""
        if ndigits is not None and type(ndigits) is not int:
            raise TypeError("round() of a sample's value takes an int number of digits")
        number = self._plain_answer().get("number")  # the answer must round it (``number_results``)
        result = self._session.ask("round", self._data, root=self._root, ref=self._ref, kin=self._kin, ndigits=ndigits)
        if not round_agrees(number, ndigits, _number_of(result)):
            raise TypeError(f"round() of the sample's {self._type[:100]!r} does not round the number it equals "
                            f"({number!r})")
        return result

    def _number(self, how: str, kind: type) -> Any:
        """``float(x)``, ``int(x)``, ``operator.index(x)`` (``range(x)``, ``xs[x]``): the number
        the sample's ``__float__``/``__int__``/``__index__`` makes, exactly a float or an int.
        Why: ``float(Frac(1, 2)) == 0.5`` and ``int(Num(3)) == 3`` raised TypeError here, so right
        solutions scored 0. Sound: the tests compare a number the sample made without seeing
        theirs, as a function's return; a ``__float__`` giving a constant is a function giving one.
        It must be the number its comparisons and operators are computed on (``_plain_answer``,
        asked first so that number is kept for them): an object equal to 4 (``x > 1``, ``x % d``)
        whose ``__index__`` gave 2 (``range(2, x)``, ``math.isqrt(x)``) or whose ``__float__`` gave
        2.0 (``math.sqrt(x)``) passed ``is_prime(x)`` for 4, 6, 8... (a forged ``primes``, 1.0)."""
        plain = self._plain_answer()
        value = self._session.ask("number", False, ref=self._ref, how=how)
        if type(value) is not kind:
            raise TypeError(f"{how}() of a sample's value gave no {kind.__name__}")
        if not _agrees(value, plain):
            raise TypeError(f"{how}() of the sample's {self._type[:100]!r} gave {value!r}, not the number it equals "
                            f"and is compared as ({plain.get('number', plain.get('near'))!r})")
        return value

    def __float__(self) -> float:
        return self._number("float", float)

    def __int__(self) -> int:
        return self._number("int", int)

    def __index__(self) -> int:
        return self._number("index", int)

    def __hash__(self) -> int:
        """The sample's own ``hash`` of it, asked once and kept, so it stays put in the tests' sets
        and dicts (unhashable where it is unhashable there). Why: by identity, two equal frozen
        dataclass objects of the sample's landed in different buckets, so ``{mid(p, q)} ==
        {Point(1, 1)}`` and ``d[mid(p, q)]`` failed right solutions. Sound: a hash only picks a
        bucket; what is in it is still told apart by ``__eq__``, which never makes one of the
        sample's equal a value of the tests' (all its hashes alike only cost the sample time). One
        that equals a number of theirs (``_plain_answer``, asked at each hash: its number may
        change with it) hashes as that number, and a hashable one equal to a str of theirs as that
        str, as Python requires of equal values. Why: its own hash put it in another bucket, so an
        object equal to 4 was not ``in {4, 6}``, a key of ``{4: 'c'}`` or in ``set(r) & {4}``: a
        forged ``primes`` of such 4, 6, 8, 9 passed ``x not in COMPOSITES`` (1.0)."""
        number = self._plain_answer().get("number")
        if number is not None:
            return hash(number)
        cached = self._hash
        if cached is None:
            cached = self._session.ask("hash", False, ref=self._ref)
            if type(cached) is not int:
                raise TypeError("hash() of a sample's value is not an int")
            object.__setattr__(self, "_hash", cached)
        text = self._plain_answer(text=True).get("str")  # asked once it is known hashable: its text may be long
        return hash(text) if text is not None else cached

    def __repr__(self) -> str:
        return f"<{self._type[:100]} in the sample>"

    def __reduce__(self) -> Any:
        raise TypeError("a sample's value cannot be pickled")


class _SampleDoc:
    """``Remote.__doc__``: the class's docstring read on the class, the sample's own ``__doc__``
    read on one of its values. Why: every value had the harness's class docstring, so ``assert
    add.__doc__`` held for a solution without one (1.0 where the tests ask for a docstring)."""

    def __init__(self, doc: str | None) -> None:
        self.doc = doc

    def __get__(self, value: Remote | None, owner: type | None = None) -> Any:
        if value is None:
            return self.doc
        return value._session.ask("getattr", False, root=value._root, ref=value._ref, kin=value._kin, name="__doc__")


Remote.__doc__ = _SampleDoc(Remote.__doc__)  # type: ignore[assignment]


def _number_of(value: Any) -> Any:
    """``value``, or the number a sample's value is compared as (None where it has none)."""
    return value._plain_answer().get("number") if isinstance(value, Remote) else value


def _agrees(value: object, plain: dict[str, Any]) -> bool:
    """Whether a conversion's ``value`` is the number ``plain`` (``Remote._plain_answer``) holds:
    a float the number it equals there, else its own ``float()`` there (NaN as NaN); an int the int
    it equals there, else within 1 of its number (``int()`` of 3.5 truncates or floors). Nothing to
    agree with: it agrees."""
    if type(value) is float:
        said = plain.get("number")
        if type(said) is int:
            try:
                said = float(said)  # 10**30 is no float, 1e30 its float (one past float's range has none)
            except OverflowError:
                return False
        said = plain.get("approx") if said is None else said
        return said is None or said == value or (said != said and value != value)
    if type(value) is not int:
        return False
    if "int" in plain:
        return bool(plain["int"] == value)
    near = plain.get("near")
    return near is None or near != near or abs(near) == float("inf") or abs(value - near) < 1


def tests_next(iterator: Any, /, *default: Any) -> Any:
    """``next`` as the tests see it: Python's, except that a sample's iterator that ended
    (``IteratorEnd``: its StopIteration crosses as an error, never as control flow) gives
    ``default`` where one is given, as Python's does. Why: a right generator used up failed
    ``next(g, 'done') == 'done'`` (the end raised through Python's ``next``). Sound: ``default`` is
    the tests' value, given only where the sample's iterator really raised StopIteration."""
    if isinstance(iterator, Remote) and len(default) == 1:
        try:
            return iterator.__next__()
        except IteratorEnd:
            return default[0]
    return next(iterator, *default)


def _made_with(value: Any, depth: int = 0) -> frozenset[int]:
    """The sample's values in a call's arguments, at any depth, and those they were made with."""
    if isinstance(value, Remote):
        return value._from | {value._key}
    if depth > 8 or type(value) not in (list, tuple, dict, set, frozenset):
        return frozenset()
    parts = list(value.items()) if type(value) is dict else value
    return frozenset().union(*[_made_with(part, depth + 1) for part in parts])


def _families(value: Any, depth: int = 0) -> list[int | None]:
    """The families (``Remote._kin``) of the sample's values in a call's arguments, at any depth."""
    if isinstance(value, Remote):
        return [value._kin]
    if depth > 8 or type(value) not in (list, tuple, dict, set, frozenset):
        return []
    parts = list(value.items()) if type(value) is dict else value
    return [kin for part in parts for kin in _families(part, depth + 1)]

