"""The trainer's side of a test run: the dataset's tests execute here, never in the sample.

Names the solution defines become stand-ins here: a function is a ``Remote`` whose call is sent to
the sample with the arguments as typed values, and what comes back is rebuilt from exact built-in
types (``values.decode``) or is another ``Remote``. Comparisons, ``assert`` and the tests' helpers
all run in this process on those values, so nothing the sample does to its own interpreter
(patching builtins, writing to a descriptor, exiting, an ``__eq__`` that always agrees, printing
"passed") can turn a failed test into a pass. A ``Remote`` compares equal to itself, and to
another of the sample's values only as the sample's own ``==`` says (``Remote._compare``): never
to a value of the tests' on its say alone (a number or str of theirs only where its own
conversion gives it, ``Remote._equals_plain``); likewise two of them combine by the sample's
operators (``Remote._arith``), never with a value of the tests' (with their number, its own number
is combined and ordered here: ``Remote._plain_answer``), and one answers
``float()``, ``int()``, ``round()`` and unary operators by its own methods. It hashes as the sample's ``hash`` says (a set member, a dict key), which
picks a bucket only. The tests' statements run one at a time, with the cell's ``from __future__``
imports, in a module of theirs that is in ``sys.modules`` while they run (``tests_namespace``).

Whose names: the tests' globals are theirs alone. The solution's names sit one layer below them,
in the namespace's builtins dict (under the trainer's real builtins), so whatever the tests or
``setup`` bind wins however equal it is to the sample's value (a module, a cached small int), and
a name their source binds anywhere is never the sample's, even before or when that binding fails
(``r = f(2)`` raising must not leave the sample's ``r`` for the next assert). Builtins always mean
the trainer's builtins: a solution cannot shadow ``sorted`` or ``isinstance`` for the tests.

Limits (documented in ``polyrl.rewards.code``): arguments must be plain data, values the sample
returned, a ``REBUILT`` standard value or a function of the tests' (called back: ``tests_callbacks``),
and a test sees in-place changes to its arguments only through
values the sample returns, or in its lists, dicts and sets after a call (``in_place``; shrunk only
where no check of theirs may read them vacuously: ``vacuous_reads``). A module the solution imported stands here for a read-only view of the
trainer's own copy when it is in ``SAFE_MODULES`` and is unusable otherwise: a name the sample
chose is never imported (``unittest.__main__`` runs tests on import). A name the tests use
without binding it is the solution's, except a well-known module name (``TEST_MODULES``: ``math``,
``re``, ``np``, ``pd``...) that the tests only use as a module (``math.isclose(...)``): that is
the trainer's real module, whatever the solution bound to it. Why: MBPP keeps ``import math`` in a
column of its own and numpy cells lean on the solution's ``import numpy as np``, so a solution
defining ``class math`` whose ``isclose`` always agrees scored 1. Likewise a standard function,
class or constant (``permutations``, ``reduce``, ``Counter``, ``ascii_lowercase``) the tests use as
a helper beside the task's function is the trainer's (``polyrl.sandbox.standard_names`` says
which), and is sent to the sample by name when a test passes it (``sort_by(xs, len)``). Tests
that use any other module import it themselves (or in ``setup``).

This module runs the steps (``run_tests``) and converts the sample's answers (``Session``); the
rest lives in modules of one job each, its names still importable from here: ``remote`` (the
sample's values), ``remote_exceptions``, ``standard_values`` (standard types sent as data),
``tests_modules`` and ``module_views`` (which module a name is), ``numpy_checks`` and
``pairing`` (the tests' numpy checks and ``zip``/``map``/``enumerate``/``len``, never vacuous), ``in_place``
(what an in-place call did to the tests' arguments), ``reader`` (a sample's items as the tests take them)."""

from __future__ import annotations

import ast
import builtins
import collections
import io
import symtable
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from polyrl.sandbox import call_cases, program_cases, sample_identity, tests_callbacks
from polyrl.sandbox.attribute_reads import register as register_attribute_sites
from polyrl.sandbox.awaited_calls import finished, is_awaited
from polyrl.sandbox.channel import Channel, SampleStopped
from polyrl.sandbox.compared_copies import register as register_compared_copies
from polyrl.sandbox.defaulted_reads import register as register_defaulted_sites
from polyrl.sandbox.in_place import write_back, written
from polyrl.sandbox.suppressed import register as register_suppressed
from polyrl.sandbox.vacuous_counts import register as register_vacuous_counts
from polyrl.sandbox.vacuous_reads import Vacuous, compared_with_answer, reached, read_vacuously
from polyrl.sandbox.module_views import (
    BOUND_CODE, BuiltinsLayer, BuiltinsView, ModulesView, ModuleView, ModuleWithViews, bound_builtins)
from polyrl.sandbox.numpy_checks import (
    NUMPY_CHECKS, NUMPY_COMPARISONS, NumpyChecks, NumpyFunction, empty_array, one_empty, plain_array)
from polyrl.sandbox.pandas_values import is_pandas, pandas_made, pandas_plain
from polyrl.sandbox.pairing import PAIRING_CLASSES, STAND_INS, TESTS_FILES, tests_filter, tests_pairing
from polyrl.sandbox.reader import same_items
from polyrl.sandbox.sample_types import tests_isinstance, tests_issubclass, tests_repr, tests_type
from polyrl.sandbox.remote import DATA_PREDICATES, DATA_QUERIES, Remote, tests_next
from polyrl.sandbox.remote_exceptions import (
    CONTROL, EXCEPTIONS, MAX_EXCEPTION_ATTRS, MAX_LINEAGE, MAX_STAND_INS, RemoteError, SampleExit, exception_parts,
    exception_state, exception_text, remote_exception)
from polyrl.sandbox.shrinking import returned_items
from polyrl.sandbox.standard_names import SOLUTION_MODULE, standard_object_name
from polyrl.sandbox.standard_values import CONSTRUCTED, REBUILDERS, REBUILT, named_tuple, numpy_constructed, rebuilt
from polyrl.sandbox.step_state import leaves_state
from polyrl.sandbox.self_compared import register as register_self_compared
from polyrl.sandbox.subset_reads import register as register_subset_sites
from polyrl.sandbox.truth_loops import tests_all, tests_any, tests_sum
from polyrl.sandbox.tests_input import patched_input, well_formed
from polyrl.sandbox.tests_input import reply as tests_input_reply
from polyrl.sandbox.tests_analysis import Analysis, analysed
from polyrl.sandbox.tests_namespace import registered
from polyrl.sandbox.tests_modules import (
    SAFE_MODULES, TEST_MODULES, NotInstalled, Unavailable, doctest_view, helper_objects, local_module,
    module_objects, tests_view,
    unbound_modules)
from polyrl.sandbox.values import MAX_DEPTH, ProtocolError, decode, encode, spread
from polyrl.sandbox.zipped_views import register as register_view_sites

#: What other modules and the tests import from here: its own names and those of the modules it was split into.
__all__ = [
    "CONSTRUCTED", "DATA_PREDICATES", "DATA_QUERIES", "MAX_EXCEPTION_ATTRS", "MAX_LINEAGE", "MAX_STAND_INS",
    "NUMPY_CHECKS", "NUMPY_COMPARISONS", "REBUILT", "SAFE_MODULES", "TEST_MODULES", "BuiltinsView", "ModuleView",
    "ModuleWithViews", "ModulesView", "NotInstalled", "NumpyChecks", "NumpyFunction", "ProtocolError", "Remote",
    "RemoteError", "Session", "SolutionModule", "bound_names", "decode", "empty_array", "exception_parts",
    "exception_state", "exception_text", "global_names", "helper_objects", "local_module", "named_tuple",
    "not_implemented_is_no_truth", "one_empty", "plain_array", "rebuilt", "remote_exception", "run_tests",
    "symbol_tables", "tests_filter", "tests_pairing", "tests_view", "unbound_modules"]

_BUILTIN_NAMES = frozenset(dir(builtins))
#: How many of the tests' latest calls' arguments a session keeps for ``Session.handed_since``: a
#: value left more new items than that by as many calls is rare, and memory stays bounded.
MAX_HANDED = 256
#: Python's warning for ``bool(NotImplemented)`` (``not_implemented_is_no_truth``), as a filter's pattern.
_NOT_IMPLEMENTED_TRUTH = "NotImplemented should not be used in a boolean context"


class Session:
    """Requests to one running sample, and the conversion of its answers."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.dirty = False
        self.asks = 0  # requests to the sample: a test that made none never looked at it
        self.read_plain = False  # a plain value of the sample's was read through the solution module
        self.plain_names: set[str] = set()  # the sample's names that came over as plain values
        self.objects: frozenset[str] = frozenset()  # names the tests use as objects (``object_use``)
        self.varied: frozenset[str] = frozenset()  # names the tests ask queries in loops (``object_use``)
        self.changers: frozenset[str] = frozenset()  # names of objects the tests change (``object_use``)
        self.families: dict[int, int] = {}  # a family member -> the one above it (``join``)
        self.changed: dict[int, int] = {}  # a family's head -> the request that last may have changed it
        self.called_on: dict[int, list[int]] = {}  # a value -> the requests that called a method of its own
        self.gave: dict[int, Any] = {}  # such a request -> what the call returned (``shrinking.taken_back``)
        self.returned_by: dict[int, list[int]] = {}  # a value -> the requests of the calls that returned it
        self.said_empty: dict[int, int] = {}  # a value -> the request whose ``is_empty()`` last said True
        self.touches: dict[int, list[int]] = {}  # a family's head -> the requests that may have changed it
        #: the latest calls' requests -> their arguments (``handed_since``); bounded, as tests calling
        #: ``f(list(range(1000)))`` in a loop would otherwise hold every list to the run's end
        self.handed: collections.deque[tuple[int, list[Any]]] = collections.deque(maxlen=MAX_HANDED)
        #: a value a loop read emptied, unseen empty since -> the verdicts that loop ran in (``Remote._emptied_unseen``;
        #: None: not a test's, the next test's)
        self.unconfirmed: dict[int, set[int | None]] = {}
        #: an object's key -> its attributes read as plain data -> the key their readings are kept
        #: under (negative: never a sample's ref) (``Remote._plain_attribute``)
        self.plain_attributes: dict[int, dict[str, int]] = {}
        #: such a key -> the items its last reading gave, and that request
        self.plain_reads: dict[int, tuple[list[Any], int]] = {}
        #: a value whose ``bool`` said true -> that request (``Remote.__bool__``, ``Remote._true_over_nothing``)
        self.truthy: dict[int, int] = {}
        self.effect_calls: frozenset[str] = frozenset()  # the solution's functions the tests call as statements
        self.all_changed: list[int] = []  # the requests that called one (``touch_all``)
        #: calls handed nothing of the tests' own (``r.reset()``, ``s.pop()``, ``show(r)``): each may take
        #: only the items it returns (``changes``' ``taking``)
        self.silent: set[int] = set()
        self.named: dict[str, int] = {}  # a global name of the sample's -> its object's family, every step's
        self.stand_ins: dict[tuple[tuple[str, str], ...], type[BaseException]] = {}  # ``exception_class``
        self.class_refs: dict[type, int] = {}  # a stand-in of one of the sample's names -> its class there
        self.vacuous: Vacuous | None = None  # what a check may read vacuously (``vacuous_reads``), once known
        #: the streams as the tests start: the sample's printing reaches only streams they put in their place
        self.streams = {"out": sys.stdout, "err": sys.stderr}
        self.stdin = sys.stdin
        #: what the tests wrote in their ``builtins`` (``BuiltinsLayer._written``): a patched ``input`` there
        self.written_builtins: dict[str, Any] = {}
        self.in_input = False  # the tests' ``input`` is answering the sample (``tests_input``)
        #: the tests' functions handed to the sample, by the index it calls them back with (``tests_callbacks``)
        self.callbacks: list[Any] = []
        self.handed_index: dict[int, int] = {}  # id of one of them -> its index
        #: one of them failed an assert while called back: the test running fails, whatever the sample did then
        self.callback_asserted = False
        #: the latest exceptions the sample's answers raised here: one passing through a function of
        #: the tests' it called back is the sample's own, never their check failing (``tests_callbacks.reply``)
        self.sample_raised: collections.deque[BaseException] = collections.deque(maxlen=64)
        #: such an exception of a failing kind (an exit, an assert) on its way back to the sample
        self.passing: list[BaseException] = []
        #: the tests' ``type(value)`` of a sample's value, asked in a frame (``_type_of``), once their names are set
        self.type_of: Callable[[Remote, Any], Any] | None = None

    def printed(self, answer: dict[str, Any]) -> None:
        """Write what the sample printed while answering (``out``/``err``: text, ``server._Printed``)
        to the tests' ``sys.stdout``/``sys.stderr``, where they replaced it (``redirect_stdout``, a
        ``StringIO``, ``capsys``), as if the call had run here: a right ``hello()`` that prints failed
        ``buf.getvalue() == 'hi\\n'``. Never to the trainer's own streams: the text is the sample's."""
        for key, name in (("out", "stdout"), ("err", "stderr")):
            text = answer.get(key)
            stream = getattr(sys, name)
            if type(text) is str and text and stream is not self.streams[key] and stream is not None:
                stream.write(text)

    def arg(self, value: Any) -> Any:
        if isinstance(value, Remote):
            if value._session is not self:
                raise TypeError("a value from another sample")
            return ["r", value._ref]
        if isinstance(value, type) and value in self.class_refs:  # ``issubclass(catch(f), SolutionError)``
            return ["r", self.class_refs[value]]
        data = encode(value)
        if data is not None:
            return data
        if type(value) in (list, tuple):
            return ["l" if type(value) is list else "t", [self.arg(v) for v in value]]
        rebuilt = REBUILT.get(type(value))
        if rebuilt is not None:  # the sample makes its own of the same type from plain data
            module, name, plain = rebuilt
            return ["x", module, name, self.arg(plain(value))]
        constructed = CONSTRUCTED.get(type(value))
        if constructed is not None:
            module, name, args = constructed
            return ["X", module, name, [self.arg(a) for a in args(value)]]
        plain = pandas_plain(value)
        if plain is not None:  # the tests' DataFrame, Series or Index: the sample's pandas makes its own
            data = encode(plain)
            if data is not None:
                return ["P", data]
            raise TypeError(f"a {type(value).__name__} holding values other than plain data cannot be sent to the "
                            "sample")
        if is_pandas(value):
            raise TypeError(f"a {type(value).__name__} of a kind not rebuilt from plain data (a MultiIndex, a "
                            "nullable or timezone-aware column, ...) cannot be sent to the sample")
        made = numpy_constructed(value)
        if made is not None:  # the tests' numpy array or scalar: the sample's numpy makes its own
            return ["X", made[0], made[1], [self.arg(a) for a in made[2]]]
        if isinstance(value, types.FunctionType) and value.__code__ in BOUND_CODE:
            # the tests' ``print``, ``abs``...: the builtin it calls (``module_views.bound_builtins``)
            value = value.__wrapped__  # type: ignore[attr-defined]
        stand_in = STAND_INS.get(value.__code__) if isinstance(value, types.FunctionType) else None
        standard = ("builtins", stand_in) if stand_in is not None else standard_object_name(value)
        if standard is not None:  # a standard function, class or constant: the sample's own copy of it
            return ["g", *standard]
        if callable(value) and (not isinstance(value, type) or tests_callbacks.is_tests_class(value)):
            return ["K", self._handed(value)]  # the tests' own function (or class): the sample calls it back
        if tests_callbacks.is_tests_object(value):  # an object of a class of theirs: the sample reads it back
            return ["O", self._handed(value)]
        raise TypeError(f"a {type(value).__name__} cannot be sent to the sample (only plain data)")

    def ask(self, op: str, data: bool, root: str | None = None,
            passed: tuple[tuple[Any, ...], dict[str, Any]] | None = None, kin: int | None = None,
            **fields: Any) -> Any:
        """The sample's answer to one request; ``data``, ``root``, ``kin``: ``Remote._data``,
        ``Remote._root`` and ``Remote._kin`` of a ``Remote`` in it; ``passed``: a call's arguments
        as the tests gave them, whose lists take what an in-place function did to its copies
        (``in_place``)."""
        if self.in_input:
            raise RuntimeError("the tests' input used the solution while the solution waited for it")
        self.dirty = True
        self.asks += 1
        asked = patched_input(self.written_builtins) if op == "call" else None
        if asked is not None:  # the tests' ``mock.patch('builtins.input', ...)``: the call's ``input()`` asks it
            fields["input"] = True
        stdin = sys.stdin if op == "call" and type(sys.stdin) is io.StringIO and sys.stdin is not self.stdin else None
        if stdin is not None:  # the tests' ``sys.stdin = io.StringIO('1 2\\n')``: the call's ``input()`` reads it
            start = stdin.tell()
            fields["stdin"] = stdin.read()
            stdin.seek(start)
        passing = len(self.passing)
        answer = self.channel.ask({"op": op, **fields})
        while "ok" not in answer and ("input" in answer or "callback" in answer or "attr" in answer
                                      or "setattr" in answer or "use" in answer):
            answer = self.channel.ask(self._tests_input(asked, answer["input"]) if "input" in answer
                                      else self._called_back(answer["callback"]) if "callback" in answer
                                      else self._read_back(answer["attr"], False) if "attr" in answer
                                      else self._read_back(answer["setattr"], True) if "setattr" in answer
                                      else self._used_back(answer["use"]))
        if stdin is not None:
            read = answer.get("in")
            stdin.seek(start + min(max(read, 0), len(fields["stdin"])) if type(read) is int else start)
        self.printed(answer)
        if len(self.passing) > passing:  # the sample's exit or assert through a function of the tests'
            del self.passing[passing:]
            if answer.get("ok") is True:  # ... swallowed by it: as their check failing there would be
                self.callback_asserted = True
        if answer.get("ok") is not True:
            raised = remote_exception(answer.get("exc"), self.exception_class)
            self.sample_raised.append(raised)
            raise raised
        awaited = op == "call" and is_awaited(answer.get("v"))
        if awaited:  # an ``async def``'s answer, run to its end there: the tests get a coroutine giving it
            answer["v"] = answer["v"][1]
        value = self._answered(answer, data, root, passed, kin)
        return finished(value) if awaited else value

    def program(self, stdin: str, expected: str) -> bool:
        """Run the sample's program afresh on ``stdin`` (``program_cases``): whether the lines it
        printed are ``expected`` (``program_cases.same``). Why here: only the input goes to the
        sample, the expected output stays with the tests. A program that raises (or exits with a
        failure) fails its case, whatever it printed."""
        if type(stdin) is not str or type(expected) is not str:
            raise TypeError("a program's input and expected output are text")
        self.dirty = True
        self.asks += 1
        most = program_cases.most_printed(expected)
        # hex: two characters a byte whatever it printed, so the answer's size is known beforehand
        answer = self.channel.ask({"op": "program", "text": stdin, "most": most}, max_bytes=2 * most + 65536)
        if answer.get("ok") is not True:
            raise remote_exception(answer.get("exc"), self.exception_class)
        out = answer.get("v")
        if type(out) is not str or len(out) > 2 * most:
            return False  # printed more than a right answer can (or no output came back)
        try:
            printed = bytes.fromhex(out).decode("utf-8", "replace")
        except ValueError:
            return False
        return program_cases.same(program_cases.lines(printed), program_cases.lines(expected))

    def _answered(self, answer: dict[str, Any], data: bool, root: str | None,
                  passed: tuple[tuple[Any, ...], dict[str, Any]] | None, kin: int | None) -> Any:
        if passed is not None and written(answer.get("v")):
            self._decoded(lambda v: write_back(v, *passed, may_shrink=self._may_shrink, may_change=self._may_change),
                          answer.get("v"))
            if len(answer["v"]) == 3:  # the call returned None
                return None
            return self._decoded(lambda v: self.value(v, data=data, root=root, kin=kin), answer["v"][3])
        return self._decoded(lambda v: self.value(v, data=data, root=root, kin=kin), answer.get("v"))

    def _handed(self, value: Any) -> int:
        """Its index among what the tests handed the sample, the same each time (``is`` holds there)."""
        index = self.handed_index.get(id(value))
        if index is None:
            self.callbacks.append(value)  # kept, so its id is never another's
            index = self.handed_index[id(value)] = len(self.callbacks) - 1
        return index

    def _read_back(self, message: Any, writing: bool) -> dict[str, Any]:
        """The reply to the sample reading (or setting) an attribute of an object of the tests' it was handed."""
        index, name, data = tests_callbacks.well_formed_attribute(message, self.callbacks, writing, self.channel)
        value = self._decoded(self.value, data) if writing else None
        reply, failed = tests_callbacks.attribute_reply(self.callbacks[index], name, value, writing, self.arg)
        self.callback_asserted = self.callback_asserted or failed  # their property's or setter's check
        return reply

    def _used_back(self, message: Any) -> dict[str, Any]:
        """The reply to the sample taking the length of, looping over, indexing or comparing an
        object of the tests' it was handed (``tests_callbacks.USES``)."""
        index, how, data = tests_callbacks.well_formed_use(message, self.callbacks, self.channel)
        values = self._decoded(lambda v: [self.value(a) for a in v], data)
        reply, asserted = tests_callbacks.reply(tests_callbacks.USES[how][1], [self.callbacks[index], *values], {},
                                                self.arg, self.sample_raised, self.passing)
        self.callback_asserted = self.callback_asserted or asserted
        return reply

    def _called_back(self, message: Any) -> dict[str, Any]:
        """The reply to the sample calling a function of the tests' it was handed (``tests_callbacks``)."""
        index, args, kwargs = tests_callbacks.well_formed(message, len(self.callbacks), self.channel)
        args = self._decoded(lambda v: [self.value(a) for a in v], args)
        kwargs = self._decoded(lambda v: {k: self.value(a) for k, a in v.items()}, kwargs)
        reply, asserted = tests_callbacks.reply(self.callbacks[index], args, kwargs, self.arg,
                                                self.sample_raised, self.passing)
        self.callback_asserted = self.callback_asserted or asserted
        return reply

    def _tests_input(self, asked: Callable[..., Any] | None, prompt: Any) -> dict[str, Any]:
        """The reply to the sample's ``input()`` in a call: the tests' patched ``input`` called
        (``tests_input``). Asking when the tests patched none, or with anything but a str prompt, is
        no answer of the protocol: the sample is stopped as crashed."""
        if asked is None or not well_formed(prompt):
            self.channel.dead = SampleStopped("crashed", "the sample asked for input the tests did not give")
            raise self.channel.dead
        self.in_input = True
        try:
            return tests_input_reply(asked, prompt)
        finally:
            self.in_input = False

    def family(self, member: int) -> int:
        """The head of ``member``'s family (``join``)."""
        families = self.families
        while (above := families.get(member, member)) != member:
            families[member] = families.get(above, above)  # halve the path
            member = above
        return member

    def join(self, members: Iterable[int | None]) -> int | None:
        """One family of ``members`` (None: a function of the sample's names, of no family), its
        head, or None where there is none. Why families: an answer of the sample's may change when
        an object it was made from, or with, is changed (``nodes = g.nodes`` after
        ``g.remove(3)``), and otherwise never (``Remote._snapshot``)."""
        heads = {self.family(m) for m in members if m is not None}
        if not heads:
            return None
        head, *rest = sorted(heads)
        for other in rest:
            self.families[other] = head
            self.changed[head] = max(self.changed.get(head, 0), self.changed.pop(other, 0))
            self.touches.setdefault(head, []).extend(self.touches.pop(other, ()))
        return head

    def touch(self, members: Iterable[int | None]) -> None:
        """The families of ``members`` may change with the next request (a call that reaches them)."""
        for head in {self.family(member) for member in members if member is not None}:
            self.changed[head] = self.asks + 1
            self.touches.setdefault(head, []).append(self.asks + 1)

    def touch_all(self) -> None:
        """Every value may change with the next request: a function of the solution's called for
        its effect (``register('a')``) may change any through the sample's global state."""
        self.all_changed.append(self.asks + 1)

    def call_on(self, ref: int) -> None:
        """Value ``ref`` may change with the next request without its family being reached: a
        method of its own, or of an object a call made with it, called for its value (``assert
        s.pop() == 3``, ``shop.sell()`` after ``shop = Shop(s)``)."""
        self.called_on.setdefault(ref, []).append(self.asks + 1)

    def soft_changes(self, ref: int, since: int) -> int:
        """How many calls after request ``since`` may have changed value ``ref`` without reaching
        its family (``call_on``, ``touch_all``): each may take one item, as a right ``pop`` does
        (``Remote._shrunk_softly``)."""
        return sum(at > since for at in self.called_on.get(ref, ())) + sum(at > since for at in self.all_changed)

    def returned_since(self, ref: int, since: int) -> list[Any]:
        """What the calls after request ``since`` that ``call_on`` recorded for value ``ref`` returned."""
        return [self.gave[at] for at in self.called_on.get(ref, ()) if at > since and at in self.gave]

    def handed_since(self, since: int) -> list[Any]:
        """The arguments of the tests' calls after request ``since`` (the latest ``MAX_HANDED``),
        and the items of those that are containers: what a value may hold anew since (``q.push(9)``,
        ``s.replace([9])``; ``Remote._emptied_unseen``)."""
        handed: list[Any] = []
        for at, args in reversed(self.handed):  # in request order: the latest calls are the ones asked for
            if at <= since:
                break
            handed.extend(item for arg in args for item in (arg, *returned_items(arg)))
        return handed

    def handed_to(self, ref: int, item: Any) -> bool:
        """Whether the tests passed ``item`` (or a container holding it) to a method of value
        ``ref``'s own (``b.add(1)``) or to the call that returned it (``Stack([1, 2])``), among
        the latest ``MAX_HANDED`` calls: one they put in, and expect gone after ``b.clear()``."""
        mine = {*self.called_on.get(ref, ()), *self.returned_by.get(ref, ())}
        return any(same_items([given], [item]) for at, args in self.handed if at in mine
                   for arg in args for given in (arg, *returned_items(arg)))

    def changes(self, ref: int, member: int, since: int, taking: bool = False) -> int:
        """How many requests after request ``since`` may have changed value ``ref`` (of ``member``'s
        family) in any way: a call that reaches its family (``touch``), or one ``soft_changes`` counts.
        ``taking``: only those that may have taken an item of it unseen, one each, as a right
        ``remove(x)`` does: a call handed something of the tests' (not a ``silent`` one; a ``pop()``
        takes what it returns: ``shrinking.taken_back``). Why: a forged ``primes`` holding one wrong
        item, read by ``r[0]`` (or ``len``) and emptied by ``r.reset()`` (returning None, or True),
        passed the tests' loop over it next (1.0): one call, one item, as a pop's. What it costs: a
        right ``pop()`` that returns nothing, emptying a value the tests loop over and never see
        empty, fails that loop."""
        at = {*self.touches.get(self.family(member), ()), *self.called_on.get(ref, ()), *self.all_changed}
        return sum(request > since and not (taking and request in self.silent) for request in at)

    def reads_vacuously(self, value: Remote) -> bool:
        """Whether a check of the tests' may read ``value``, a sample's value, vacuously once it
        has fewer items (``vacuous_reads.read_vacuously``); yes where the tests were too deep to
        follow or are not read yet."""
        return self.vacuous is None or read_vacuously(value, self.vacuous)

    def unchanged(self, member: int, since: int) -> bool:
        """Whether no call that reaches ``member``'s family was made after request ``since``."""
        return self.changed.get(self.family(member), 0) <= since

    def _may_shrink(self, value: Any) -> bool:
        """Whether an argument the call shortened may be written back (``in_place``): no value a
        check of the tests' may read vacuously holds it. Not before the tests' sources are read."""
        return self.vacuous is not None and not reached(value, self.vacuous)

    def _may_change(self, value: Any) -> bool:
        """Whether an argument the call changed may be written back (``in_place``): the tests
        compare no function of it with an answer of the solution's (``compared_with_answer``)."""
        return self.vacuous is None or not compared_with_answer(value, self.vacuous)

    def ask_raw_names(self) -> Any:
        answer = self.channel.ask({"op": "names"})
        if answer.get("ok") is not True:
            raise ProtocolError("the sample refused to list its names")
        return answer.get("v")

    def _decoded(self, read: Callable[[Any], Any], data: Any) -> Any:
        """``read(data)``; whatever that raises (even a BaseException: SystemExit, RecursionError,
        ...) ends this sample as "crashed" with the reason, and is no exception a test may catch.
        KeyboardInterrupt too: samples are scored on worker threads, where no signal lands."""
        try:
            return read(data)
        except BaseException as exc:  # noqa: BLE001 - the sample's bytes must not stop the trainer
            self.channel.dead = SampleStopped("crashed", f"protocol: {exception_text(exc)}")
            raise self.channel.dead from None

    def value(self, encoded: Any, depth: int = 0, data: bool = False, origin: str | None = None,
              root: str | None = None, kin: int | None = None) -> Any:
        """The value an answer describes (``data``, ``origin``, ``root``, ``kin``: see ``Remote``)."""
        if depth > MAX_DEPTH:
            raise ProtocolError("nested too deep")
        if isinstance(encoded, list) and encoded:
            tag = encoded[0]
            if tag == "r" and len(encoded) in (4, 5) and type(encoded[1]) is int and type(encoded[2]) is str \
                    and type(encoded[3]) is str:
                first = encoded[4] if len(encoded) == 5 else encoded[1]  # the object's first handle (``sample_identity``)
                if type(first) is not int or not 0 <= first <= encoded[1]:
                    raise ProtocolError("a malformed handle")
                if origin is not None and encoded[2] == "object":  # read again after each step: one family
                    kin = self.named.setdefault(origin, encoded[1])
                return Remote(self, encoded[1], encoded[2], encoded[3], data=data, origin=origin, root=root, kin=kin,
                              first=first)
            if tag == "m" and len(encoded) == 2 and type(encoded[1]) is str:
                return local_module(encoded[1])
            if tag == "H" and len(encoded) == 2 and type(encoded[1]) is int and 0 <= encoded[1] < len(self.callbacks):
                return self.callbacks[encoded[1]]  # a function or object of the tests' they handed it, given back
            if tag == "N" and len(encoded) == 2:
                return named_tuple(decode(encoded[1], depth + 1))
            if tag == "E" and len(encoded) == 3 and type(encoded[1]) is int:
                kind = self.exception_class(encoded[2])
                if kind is None:
                    raise ProtocolError("a malformed exception class")
                if kind.__module__ == SOLUTION_MODULE:  # a stand-in made here, never a built-in class
                    self.class_refs.setdefault(kind, encoded[1])
                return kind
            if tag == "x" and len(encoded) == 4 and type(encoded[1]) is str and type(encoded[2]) is str \
                    and (encoded[1], encoded[2]) in REBUILDERS:
                return rebuilt(encoded[1], encoded[2], decode(encoded[3], depth + 1))
            if tag == "P" and len(encoded) == 2:  # the sample's DataFrame, Series or Index, as the trainer's own
                return pandas_made(decode(encoded[1], depth + 1))
            if tag == "L" and len(encoded) == 2 and isinstance(encoded[1], list):
                return spread([self.value(item, depth + 1, data, root=root, kin=kin) for item in encoded[1]])
        return decode(encoded)

    def exception_class(self, lineage: Any) -> type[BaseException] | None:
        """The trainer's stand-in for an exception class of the sample's, from its MRO as
        ``[module, name]`` pairs (``server._lineage``), or None when that is malformed: a plain
        class of that name deriving from the stand-in of the next class, down to the first
        built-in exception (``SampleExit`` for ``SystemExit``; ``RemoteError`` for one that is no
        ``EXCEPTIONS``: ``StopIteration``, ``BaseException``). One class per lineage and sample, the same for the
        sample's name and for what it raised. Why: a solution's ``SolutionError`` was a handle no
        ``except``, ``pytest.raises`` or ``assertRaises`` takes, and what it raised came as a
        ``RemoteError``, so right solutions failed every such test (and ``class E(ValueError)``
        raised failed ``pytest.raises(ValueError)``). Nothing of the sample's runs in it."""
        if not (isinstance(lineage, list) and 0 < len(lineage) <= MAX_LINEAGE and all(
                isinstance(p, list) and len(p) == 2 and type(p[0]) is str and type(p[1]) is str
                and len(p[0]) <= 100 and len(p[1]) <= 100 for p in lineage)):
            return None
        return self._stand_in(tuple((module, name) for module, name in lineage))

    def _stand_in(self, lineage: tuple[tuple[str, str], ...]) -> type[BaseException] | None:
        if not lineage:
            return RemoteError
        (module, name), rest = lineage[0], lineage[1:]
        if module == "builtins":
            return EXCEPTIONS.get(name) or CONTROL.get(name, RemoteError)
        if not name.isidentifier():  # no class of that name here: the next one stands for it
            return self._stand_in(rest)
        made = self.stand_ins.get(lineage)
        if made is None:
            base = self._stand_in(rest)
            if base is None or len(self.stand_ins) >= MAX_STAND_INS:
                return None
            try:
                made = type(name, (base,), {"__module__": SOLUTION_MODULE})
            except TypeError:  # a base that takes no subclass: no stand-in
                return None
            self.stand_ins[lineage] = made
        return made

    def names(self, data: Any) -> dict[str, Any]:
        """The sample's global names as stand-ins; a malformed listing ends the sample."""
        return self._decoded(self._names, data)

    def _names(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ProtocolError("the sample's names are not a mapping")
        # never a builtin's name, never a dunder (``__builtins__`` would replace every builtin)
        names = {name: self.value(value, origin=name) for name, value in data.items()
                 if type(name) is str and name.isidentifier() and name not in _BUILTIN_NAMES
                 and not name.startswith("__")}
        self.plain_names |= {name for name, value in names.items()
                             if not isinstance(value, (Remote, ModuleView, Unavailable))}
        return names


class SolutionModule:
    """What ``import solution`` / ``from solution import add`` give the tests: the sample's names,
    read when used. Why: tests written to import the solution from a module (KodCode's) bound
    ``add`` themselves, so the sample's ``add`` was never seen and every completion scored 0.
    ``from solution import *`` binds nothing (``__all__`` is empty): the names it would bring are
    the sample's already, below the tests' own (module doc), and binding them would put the
    sample's ``permutations`` over the trainer's standard one. Without ``__all__`` the import
    raised, so every completion failed such a cell."""

    __slots__ = ("_session", "_names")
    __all__: tuple[str, ...] = ()

    def __init__(self, session: Session, names: dict[str, Any]) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_names", names)

    def __getattr__(self, name: str) -> Any:
        if name not in self._names:
            raise AttributeError(f"the solution defines no {name!r}")
        value = self._names[name]
        if not isinstance(value, (Remote, ModuleView, Unavailable)):
            object.__setattr__(self._session, "read_plain", True)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("the solution's names cannot be changed from the tests")

    def __repr__(self) -> str:
        return f"<module {SOLUTION_MODULE!r} (the sample's names)>"


def symbol_tables(sources: Iterable[str]) -> Iterator[symtable.SymbolTable]:
    """Every symbol table (the module's, each function's and class's) of the sources that parse;
    a source that is not Python fails when run, binding and reading nothing."""
    for source in sources:
        try:
            tables = [symtable.symtable(source, "<tests>", "exec")]
        except Exception:  # noqa: BLE001 - not Python
            continue
        while tables:
            table = tables.pop()
            yield table
            tables.extend(table.get_children())


def bound_names(sources: Iterable[str]) -> frozenset[str]:
    """Every global name these sources bind anywhere: assignments, imports, ``def``/``class``,
    loop/``with``/``except`` targets, ``del``, a walrus in a comprehension, ``global`` in a
    function. Found statically, so a binding that fails or has not run yet still counts."""
    names: set[str] = set()
    for table in symbol_tables(sources):
        top = table.get_type() == "module"
        for sym in table.get_symbols():
            binds = sym.is_assigned() or sym.is_imported()
            if binds and (top or sym.is_declared_global()):
                names.add(sym.get_name())
    return frozenset(names)


def run_tests(session: Session, hello: dict[str, Any], steps: Sequence[tuple[str, bool]],
              setup: str, analysis: Analysis | None = None) -> tuple[list[bool], bool]:
    """Run the steps here against the sample's names: one bool per test step, and whether the
    tests looked at the sample at all (a request to it, or a plain value of its that they name).
    Why the second: tests that never consult the sample pass every completion, an empty one too
    (a check shadowed by a builtin's name, ``try: add except NameError: ...``), so such a pass
    must not count. Each step is compiled at its own lines (``step_lines``), so no two steps' code
    shares a place. ``analysis``: what the tests' text alone says (``tests_analysis``), found
    here (cached) where not given."""
    if analysis is None:
        analysis = analysed(steps, setup)
    steps, files, named = analysis.steps, analysis.files, list(analysis.named)
    paired = tests_pairing(named)
    register_subset_sites(named)
    register_view_sites(named)
    register_compared_copies(named)
    register_attribute_sites(named)
    register_defaulted_sites(named)
    register_self_compared(named)
    register_vacuous_counts(named)
    register_suppressed(named)
    real_builtins = dict(vars(builtins), zip=paired[0], map=paired[1], filter=tests_filter,
                         enumerate=paired[2], len=paired[3], next=tests_next, all=tests_all,
                         any=tests_any, sum=tests_sum)  # a copy: the trainer's own stay
    builtins_view = BuiltinsView({name: real_builtins[name]
                                  for name in ("zip", "map", "filter", "enumerate", "len", "next", "all", "any",
                                                 "sum")})
    # ``len.__self__`` is the builtins module in Python: theirs here (it raised AttributeError), and
    # so is ``print.__self__`` (it was Python's own, its zip vacuous on ``return []``)
    paired[3].__self__ = builtins_view  # type: ignore[attr-defined]
    wrapped = bound_builtins(builtins_view, real_builtins)
    real_builtins.update(wrapped)
    object.__getattribute__(builtins_view, "_own").update(wrapped)
    layer = BuiltinsLayer(builtins_view)  # looked up after the tests' globals (module doc)
    session.written_builtins = object.__getattribute__(layer, "_written")  # a patched ``input`` (``tests_input``)
    layer.refill(real_builtins)
    tests_module = types.ModuleType("tests")  # in sys.modules while they run (``tests_namespace``)
    namespace: dict[str, Any] = tests_module.__dict__
    namespace["__builtins__"] = layer
    bound = analysis.bound
    modules = module_objects(analysis.modules, builtins_view)
    modules.update(helper_objects(analysis.helpers))
    below = helper_objects(analysis.fallbacks)  # the trainer's below the solution's names (``standard_subjects``)
    namespace.update(modules)  # the tests' globals: never the sample's (module doc)
    namespace[program_cases.PROGRAM] = session.program  # stdin/stdout cases' runs (``program_cases``)
    namespace[sample_identity.SAME] = sample_identity.same  # their ``a is b`` of two of its values
    namespace[sample_identity.IS_ARGS] = sample_identity.is_args  # their ``assertIs(a, b)``
    namespace[sample_identity.CHAIN] = sample_identity.Chained  # their ``a is b is c``
    namespace[call_cases.CALL] = lambda name, args, want: call_cases.returns(
        _solution_function(sample, name)(*call_cases.arguments(args)), want)  # APPS's call-based cases
    theirs = bound | modules.keys()
    session.objects = analysis.objects
    session.varied = analysis.varied
    session.changers = analysis.changers
    session.effect_calls = analysis.effect_calls
    session.vacuous = analysis.vacuous
    sample: dict[str, Any] = {}
    solution = SolutionModule(session, sample)
    session.type_of = lambda value, frame: _type_of(session, value, sample, frame)
    pythons: tuple[type, ...] = (zip, map, filter, enumerate)
    stand_ins: dict[type, Any] = {kind: real_builtins[kind.__name__] for kind in pythons}
    stand_ins.update({made: real_builtins[made.__mro__[1].__name__] for made in PAIRING_CLASSES})  # the tests' own map(f, r)
    real_builtins["type"] = tests_type(session.type_of, stand_ins)
    real_builtins["isinstance"] = tests_isinstance(session.type_of)
    real_builtins["issubclass"] = tests_issubclass
    real_builtins["repr"] = tests_repr
    real_import = builtins.__import__

    def importer(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if name == SOLUTION_MODULE and level == 0:
            return solution
        if name == "builtins" and level == 0:
            return builtins_view
        return doctest_view(tests_view(real_import(name, globals, locals, fromlist, level), builtins_view),
                            tests_module)

    def sync(data: Any) -> None:
        names = session.names(data)
        sample.clear()
        sample.update(names)
        layer.refill(below, {name: value for name, value in names.items() if name not in theirs}, real_builtins,
                     {"__import__": importer})

    layer.refill(below, real_builtins, {"__import__": importer})
    if setup:  # before the solution's names exist, as in the sample
        try:
            exec(analysis.codes[0] or sample_identity.compiled(setup, "<setup>"), namespace)
        except Exception:  # noqa: BLE001 - setup that fails here still ran in the sample
            pass
    sync(hello.get("v"))
    passed: list[bool] = []
    not_implemented_is_no_truth()
    asks_before = session.asks
    previous = sys.gettrace()
    sys.settrace(_stop_at(session.channel))
    try:
        with registered(tests_module):
            _run_steps(session, steps, namespace, sync, passed, analysis.flags, files, analysis.stateful,
                       analysis.codes[1:])
    finally:
        sys.settrace(previous)
    consulted = session.asks > asks_before or session.read_plain or bool(session.plain_names & analysis.used)
    return passed, consulted


def _solution_function(sample: dict[str, Any], name: str) -> Any:
    """The sample's function a call-based case names (``call_cases``): its top-level ``name``, else
    the method ``name`` of a fresh ``Solution()`` (LeetCode's shape, in APPS). A name it lacks fails
    the case as a test using it would: NameError."""
    if name in sample:
        return sample[name]
    if "Solution" in sample:
        return getattr(sample["Solution"](), name)
    raise NameError(f"name {name!r} is not defined")


#: At most this many stand-ins the tests hold are offered to the sample as a value's class (``_type_of``).
MAX_TYPE_CANDIDATES = 4096


def _type_of(session: Session, value: Remote, sample: dict[str, Any], frame: Any) -> Any:
    """``type(value)`` of a sample's value for the tests (``sample_types.tests_type``): the
    stand-in the tests hold for its real type, looked for among the names of the tests' ``frame``
    (its locals, then its globals: ``from solution import Stack`` binds one of their own) and then
    the solution's names, so ``type(s) is Stack`` holds as in Python; else a stand-in of that type
    of its own."""
    if value._session is not session:
        raise TypeError("a value from another sample")
    held: dict[int, Remote] = {}
    scopes = [] if frame is None else [frame.f_locals, frame.f_globals]
    for scope in (*scopes, sample):
        for candidate in list(scope.values()):
            if isinstance(candidate, Remote) and candidate._session is session and candidate._kind == "callable":
                held.setdefault(id(candidate), candidate)
    candidates = list(held.values())[:MAX_TYPE_CANDIDATES]
    answer = session.ask("type", False, ref=value._ref, names=[v._ref for v in candidates])
    if type(answer) is int:
        if not 0 <= answer < len(candidates):
            raise ProtocolError("the sample named a class the tests do not hold")
        return candidates[answer]
    return answer


def not_implemented_is_no_truth() -> None:
    """Make Python's warning for ``bool(NotImplemented)`` an error in this process, as it is from
    Python 3.14 on (a TypeError). Why: a comparison method called by hand answers NotImplemented
    for an operand of another type, and NotImplemented is truthy, so ``assert 'ab'.__eq__(f(x))``
    (``(3).__eq__``, ``[1].__eq__``, ``Point(1, 2).__eq__(p)``...) passed every completion that
    returned anything but a str. Added each run: a caller's ``catch_warnings`` may have dropped it."""
    warnings.filterwarnings("error", message=_NOT_IMPLEMENTED_TRUTH, category=DeprecationWarning)


def global_names(sources: Iterable[str]) -> set[str]:
    """Every global name these sources read, at the top or in a function or class body."""
    return {sym.get_name() for table in symbol_tables(sources) for sym in table.get_symbols()
            if sym.is_referenced() and sym.is_global()}


def _used_names(sources: Iterable[str]) -> set[str]:
    """Every name these sources mention (a plain value of the sample's may be read by any)."""
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return names


def _stop_at(channel: Channel) -> Callable[..., Any]:
    """A trace function that stops the tests' own Python lines (``<test>``/``<setup>`` code, their
    helper functions included) at the sample's deadline. Why: the tests run here, on values the
    sample chose, so ``for _ in range(f(x))`` ran for as long as the sample wanted, in the trainer,
    past every timeout. The channel is marked dead too, so a test catching the stop still ends the
    run of this sample. Not reachable from here: one C call on such a value (``sum(range(f(x)))``),
    which holds the interpreter until it returns: the process the tests run in is killed then
    (``Sandbox._talk_forked``; with ``tests_in = "trainer"`` it holds the trainer)."""
    def line(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and time.monotonic() > channel.deadline:
            channel.dead = SampleStopped("timeout", "the tests ran past timeout_s on the sample's values")
            raise channel.dead
        return line

    def call(frame: Any, event: str, arg: Any) -> Any:
        return line if frame.f_code.co_filename in TESTS_FILES else None
    return call


def _run_steps(session: Session, steps: Sequence[tuple[str, bool]], namespace: dict[str, Any],
               sync: Callable[[Any], None], passed: list[bool], flags: int = 0,
               files: Sequence[str] = (), stateful: Sequence[bool] | None = None,
               codes: Sequence[types.CodeType | None] = ()) -> None:
    """Run the steps in order, one verdict per test. A step that is not a test and raises is a
    failed check itself, and every test after it fails unrun, as a script run of the cell stops
    there; so does a failed test that leaves state a later step reads (``step_state``). Why:
    the failure was ignored, so a cell that collects results and asserts on them at the end
    (``assert all(results)`` of an empty list) passed a solution that only raised. A failed test
    that leaves nothing behind (an ``assert``, a loop of asserts, a test function) keeps the
    per-test partial credit: the tests after it still run. A test in which (or in a step before it
    that is no test) a loop read a sample's value emptied unseen fails where no whole reading of
    the tests' sees that value empty before the run ends (``Remote._emptied_unseen``). ``flags``: the cell's ``from
    __future__`` imports (``tests_namespace.future_flags``), which apply to every step; ``stateful``:
    ``step_state.leaves_state`` of the steps, found here where not given; ``codes``: each step
    compiled once for every sample (``tests_analysis``), compiled here where not given."""
    stopped = False
    if stateful is None:
        stateful = leaves_state([source for source, _ in steps])
    for index, ((source, is_test), leaves) in enumerate(zip(steps, stateful)):
        if stopped:
            if is_test:
                passed.append(False)
            continue
        ok = False
        if session.dirty:  # a call may have changed the sample's globals
            sync(session.ask_raw_names())
            session.dirty = False
        # optimize=0: under ``python -O`` (or PYTHONOPTIMIZE) compile would drop every assert;
        # dont_inherit: this module's ``from __future__ import annotations`` is not the tests'
        try:
            file = files[index] if index < len(files) else "<test>"  # its window's (``step_lines``)
            code = codes[index] if index < len(codes) else None
            exec(code if code is not None else sample_identity.compiled(source, file, flags), namespace)
            ok = True
        except SampleStopped:
            raise
        except KeyboardInterrupt:
            raise
        except SystemExit as exc:  # the tests' ``sys.exit(0)`` ends a script run as a success
            ok = exc.code in (None, 0) and not isinstance(exc, SampleExit)  # the sample's never does
        except BaseException:  # noqa: BLE001 - any other failure of a test is a failed test
            ok = False
        if session.channel.dead is not None:  # the sample stopped, whatever the test's ``except`` did
            raise session.channel.dead
        if session.callback_asserted:  # their check inside a function they handed it (``tests_callbacks``)
            session.callback_asserted = ok = False
        if is_test:  # a loop in this step or one before that is no test: this test's verdict
            for verdicts in session.unconfirmed.values():
                if None in verdicts:
                    verdicts.discard(None)
                    verdicts.add(len(passed))
        if is_test or not ok:
            passed.append(ok)
        stopped = not ok and (leaves or not is_test)
    for verdict in {v for verdicts in session.unconfirmed.values() for v in verdicts if v is not None}:
        passed[verdict] = False  # its loop read a value emptied that no whole reading saw empty
