"""Test helper: which autograd nodes produced a tensor (tells whether a fused autograd step ran)."""

from __future__ import annotations

from typing import Any


def node_names(out: Any) -> set[str]:
    """The class names of every node in ``out``'s autograd graph (empty for a tensor without one)."""
    stack, seen = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(n for n, _ in node.next_functions)
    return {n.name() for n in seen}
