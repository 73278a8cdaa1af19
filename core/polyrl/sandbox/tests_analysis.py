"""What ``harness.run_tests`` reads from the tests' text alone, found once per distinct tests.

Why: each sample's run parsed and walked the tests' steps and setup some dozen times (their
bindings, helpers, objects, vacuous reads, which steps leave state...), about as long as running
them, and the samples of one prompt (a GRPO group) and of later steps share the same tests. None
of it depends on the sample, so it is kept in a bounded cache keyed by the text itself (exact:
a hit compares the whole text, never a digest) and handed to each run. Found in the trainer
before the tests' copy is forked (``Sandbox._talk_forked``), so the copies inherit it; the copy
never takes this module's lock (the analysis reaches it through the closure), so a fork while
another thread holds the lock cannot stall it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence

from types import CodeType

import attrs

from polyrl.sandbox import sample_identity
from polyrl.sandbox.object_use import changer_roots, effect_call_names, object_roots, varied_query_roots
from polyrl.sandbox.remote import DATA_QUERIES
from polyrl.sandbox.standard_names import helper_names
from polyrl.sandbox.step_lines import laid_out_in_files
from polyrl.sandbox.step_state import leaves_state
from polyrl.sandbox.tests_modules import unbound_module_names
from polyrl.sandbox.tests_namespace import future_flags
from polyrl.sandbox.vacuous_reads import Vacuous, vacuous_paths

#: Distinct tests kept (least recently used dropped first): a batch's prompts and a few steps' worth.
MAX_KEPT = 256


@attrs.frozen
class Analysis:
    """The tests' static facts ``run_tests`` uses; every field immutable, shared by every run."""

    steps: tuple[tuple[str, bool], ...]  # each at its lines (``step_lines``)
    files: tuple[str, ...]  # the file each step is compiled as
    sources: tuple[str, ...]  # the setup, then the steps
    named: tuple[tuple[str, str], ...]  # (file, text) of the setup and each step
    bound: frozenset[str]  # every global name they bind anywhere (``harness.bound_names``)
    modules: tuple[str, ...]  # ``TEST_MODULES`` names used only as modules (``tests_modules``)
    helpers: frozenset[str]  # standard names used as helpers (``standard_names.helper_names``)
    fallbacks: frozenset[str]  # the trainer's only where the solution has no such name
    objects: frozenset[str]  # ``object_use``'s roots
    varied: frozenset[str]
    changers: frozenset[str]
    effect_calls: frozenset[str]
    vacuous: Vacuous | None  # ``vacuous_reads.vacuous_paths``
    used: frozenset[str]  # every name they mention (``harness._used_names``)
    flags: int  # their ``from __future__`` flags
    stateful: tuple[bool, ...]  # per step: whether it leaves state a later one reads (``step_state``)
    codes: tuple[CodeType | None, ...]  # the setup's, then each step's (``sample_identity.compiled``); None: it raised


def _code(source: str, file: str, flags: int) -> CodeType | None:
    """``source`` compiled as the run compiles it, or None where compiling raises (the run compiles
    it again there, so its error is raised where the step runs, as before)."""
    try:
        return sample_identity.compiled(source, file, flags)
    except Exception:  # noqa: BLE001 - a step that does not compile fails when it runs
        return None


def analyse(steps: Sequence[tuple[str, bool]], setup: str) -> Analysis:
    """Find the tests' facts (uncached)."""
    from polyrl.sandbox.harness import _used_names, bound_names, global_names  # harness imports this module

    placed = laid_out_in_files(steps)
    laid = tuple((source, is_test) for source, is_test, _ in placed)
    files = tuple(file for _, _, file in placed)
    flags = future_flags(source for source, _ in laid)
    sources = (setup, *(source for source, _ in laid))
    bound = bound_names(sources)
    modules = unbound_module_names(sources, bound)
    fallbacks: set[str] = set()
    helpers = helper_names(laid, setup, bound | set(modules), global_names(sources), fallbacks)
    return Analysis(
        steps=laid, files=files, sources=sources, named=(("<setup>", setup), *zip(files, sources[1:])),
        bound=bound, modules=modules, helpers=frozenset(helpers), fallbacks=frozenset(fallbacks),
        objects=object_roots(sources), varied=varied_query_roots(sources, DATA_QUERIES),
        changers=changer_roots(sources), effect_calls=effect_call_names(sources), vacuous=vacuous_paths(sources),
        used=frozenset(_used_names(sources)), flags=flags,
        stateful=tuple(leaves_state([source for source, _ in laid])),
        codes=(_code(setup, "<setup>", 0), *(_code(source, file, flags) for (source, _), file in zip(laid, files))))


_kept: collections.OrderedDict[tuple[tuple[tuple[str, bool], ...], str], Analysis] = collections.OrderedDict()
_lock = threading.Lock()


def analysed(steps: Sequence[tuple[str, bool]], setup: str) -> Analysis:
    """``analyse``'s answer, from the cache where these exact tests were analysed before. One
    thread analyses a given text while the others wait, so a batch's samples arriving together
    pay for it once."""
    key = (tuple((source, is_test) for source, is_test in steps), setup)
    with _lock:
        found = _kept.get(key)
        if found is None:
            found = analyse(key[0], key[1])
            _kept[key] = found
            while len(_kept) > MAX_KEPT:
                _kept.popitem(last=False)
        else:
            _kept.move_to_end(key)
        return found


def clear() -> None:
    """Forget every analysis (tests measuring a first run)."""
    with _lock:
        _kept.clear()
