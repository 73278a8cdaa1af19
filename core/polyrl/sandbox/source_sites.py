"""Places in the tests' own source where a call reads a value in a way its bytecode alone does not tell.

Why one module: ``subset_reads`` and ``zipped_views`` each find such call sites statically (from
the tests' text, parsed once per run and only when first asked) and then ask, from inside a
value's ``__iter__`` or ``__getattr__``, whether the tests' frame stands at one. The parsing,
the lazy set of places and the frame lookup are the same for both; only what makes a site differs.
"""

from __future__ import annotations

import ast
import itertools
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from polyrl.sandbox.module_views import BOUND_CODE
from polyrl.sandbox.tests_guard import TESTS_FILES

#: (filename, lineno, end_lineno, col_offset, end_col_offset) of a call, as ``co_positions`` gives it.
Place = tuple[str, int, int, int, int]
#: Given a call of the tests' source (a node of the kinds ``Sites`` asks for) and every node's
#: parent (by ``id``), the node whose place is the site's (the call itself, or the attribute it
#: calls), or None where the call is no site.
SiteNode = Callable[[Any, dict[int, ast.AST]], ast.expr | None]


def place_of(code: types.CodeType, lasti: int) -> Place | None:
    """Where ``lasti`` of the tests' ``code`` is, or None (not theirs; before Python 3.11)."""
    positions = getattr(code, "co_positions", None)
    if positions is None or code.co_filename not in TESTS_FILES or lasti < 0:
        return None
    position = next(itertools.islice(positions(), lasti // 2, None), None)
    if position is None or None in position:
        return None
    return (code.co_filename, *position)


def parsed(sources: Iterable[tuple[str, str]]) -> Iterator[tuple[str, ast.AST, dict[int, ast.AST]]]:
    """Each of ``sources`` ((filename, text)) that parses, as (filename, tree, every node's parent
    by ``id``); one that does not parse (a sample may hand the tests anything) is left out."""
    for filename, text in sources:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        yield filename, tree, {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def find_sites(sources: Iterable[tuple[str, str]], site_node: SiteNode,
               kinds: tuple[type[ast.AST], ...] = (ast.Call,)) -> frozenset[Place]:
    """The places of the nodes of ``kinds`` (calls) of ``sources`` that ``site_node`` takes;
    sources that do not parse add none."""
    places: set[Place] = set()
    for filename, tree, parents in parsed(sources):
        for node in ast.walk(tree):
            if not isinstance(node, kinds):
                continue
            site = site_node(node, parents)
            if site is not None and site.end_lineno is not None and site.end_col_offset is not None:
                places.add((filename, site.lineno, site.end_lineno, site.col_offset, site.end_col_offset))
    return frozenset(places)


class Sites:
    """The sites ``site_node`` finds in the sources of the tests now running (``register``)."""

    def __init__(self, site_node: SiteNode, kinds: tuple[type[ast.AST], ...] = (ast.Call,)) -> None:
        self._site_node = site_node
        self._kinds = kinds
        self._places: Callable[[], frozenset[Place]] = frozenset

    def register(self, sources: Iterable[tuple[str, str]]) -> None:
        """Take the tests' sources ((filename, text) as ``harness.run_tests`` compiles them); they
        are parsed the first time a site is asked, so tests that never reach one pay nothing."""
        listed = list(sources)
        found: list[frozenset[Place]] = []

        def places() -> frozenset[Place]:
            if not found:
                found.append(find_sites(listed, self._site_node, self._kinds))
            return found[0]

        self._places = places

    def here(self, depth: int) -> bool:
        """Whether the frame ``depth`` levels above this call is the tests' own code at a site (or
        the tests' ``sorted``, a function of ``module_views`` calling Python's, called there)."""
        try:
            frame = sys._getframe(depth + 1)
        except ValueError:
            return False
        if frame.f_code in BOUND_CODE and frame.f_back is not None:
            frame = frame.f_back
        return place_of(frame.f_code, frame.f_lasti) in self._places()

    def above(self, limit: int = 12) -> bool:
        """Whether the nearest frame that is the tests' own code, from the caller of the function
        asking up (at most ``limit`` frames), stands at a site: a value's ``_snapshot`` is reached
        through ``__len__``, ``__iter__`` or a reader, at more than one depth."""
        frame: types.FrameType | None = sys._getframe(2)
        for _ in range(limit):
            if frame is None:
                return False
            if frame.f_code.co_filename in TESTS_FILES:
                return self.has(place_of(frame.f_code, frame.f_lasti))
            frame = frame.f_back
        return False

    def has(self, place: Place | None) -> bool:
        """Whether ``place`` (``place_of``'s) is a site; None never is."""
        return place is not None and place in self._places()
