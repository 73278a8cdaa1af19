"""``code_tests`` refuses a trainer Python whose bytecode its forgery checks were not written for.

The readers in ``polyrl.sandbox`` (``shrinking``, ``item_free_loops``, ``asserted_truths``,
``zipped_views``) read the tests' compiled code; run over the same test shapes under 3.10 they
misread them both ways (a counting loop read as a check), while ``pyproject.toml`` allows Python
>= 3.10. 3.12's shapes (no ``PRECALL``, inlined comprehensions) and 3.13's (``TO_BOOL``, fused
loads and stores) are read as 3.11's (``test_sandbox_bytecode_shapes``). The run now stops at setup with one
``error:`` naming the version instead of scoring on a misreading.
"""

from __future__ import annotations

import sys

import pytest
from polyrl.rewards.code import check_options
from polyrl.sandbox.tests_bytecode import READ_ON, unsupported_python
from polyrl.errors import RewardError


@pytest.mark.parametrize("version", [(3, 10), (3, 14)])
def test_an_unread_python_is_named_with_the_fix(version):
    why = unsupported_python(version)
    assert why is not None and f"Python {version[0]}.{version[1]}" in why and "3.11, 3.12, 3.13" in why


def test_the_pythons_the_readers_were_verified_on_are_accepted():
    assert unsupported_python((3, 11)) is None
    assert unsupported_python((3, 12)) is None
    assert unsupported_python((3, 13)) is None
    assert READ_ON == frozenset({(3, 11), (3, 12), (3, 13)})


def test_check_options_refuses_this_interpreter_only_when_unread():
    """On 3.11, 3.12 and 3.13 setup goes on to the sandbox; elsewhere it is the ``error:`` naming the version."""
    if sys.version_info[:2] in READ_ON:
        check_options("code_tests", {})
    else:
        with pytest.raises(RewardError, match=r"Python \d+\.\d+.*Fix: run the trainer under Python 3\.11 or 3\.12 or 3\.13"):
            check_options("code_tests", {})
