"""FALSE ZEROS: a numpy array the solution returns, compared elementwise with the tests' list or number.

``(f(3) == [1, 2, 3]).all()``, ``np.all(f() == 1)`` and ``(f() != [0, 0]).all()`` of a right ``f``
returning an ``ndarray`` scored 0: the harness answered the sample's value ``==`` a list with one
bool, as for a container (an array's items never equal a list's so), and ``.all()`` of a bool
raised. Such a comparison is numpy's now, on an array the trainer builds from the items the sample
sent (``Remote._elementwise``); an empty one against items still fails (``numpy_checks.empty_array``),
and an object of the sample's answering ``==`` with an object whose ``all()`` says yes still scores 0.
Scored through the real reward path (``code_tests``: sandbox, harness, the forked trainer copy).
"""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytest.importorskip("numpy", reason="needs numpy, which the tests and the sample use here")
pytestmark = pytest.mark.faults

_ARRAY = "import numpy as np\ndef f():\n    return np.array([1, 2])\n"
#: (tests, right solution).
RIGHT = {
    "against_a_list": ("assert (f() == [1, 2]).all()\n", _ARRAY),
    "against_a_number": ("assert (f() == 1).any() and not (f() == 3).any()\n", _ARRAY),
    "through_np_all": ("import numpy as np\nassert np.all(f() == [1, 2])\n", _ARRAY),
    "not_equal": ("assert (f() != [0, 0]).all()\n", _ARRAY),
    "two_dimensions": ("assert (f() == [[1, 2], [3, 4]]).all()\n",
                       "import numpy as np\ndef f():\n    return np.array([[1, 2], [3, 4]])\n"),
}
#: (tests, forged solution).
FORGED = {
    "empty_against_a_number": ("assert (f() == 3.14).all()\n", "import numpy as np\ndef f():\n    return np.array([])\n"),
    "wrong_items": ("assert (f() == [1, 2]).all()\n", "import numpy as np\ndef f():\n    return np.array([1, 3])\n"),
    "equal_to_everything": ("assert (f() == [1, 2]).all()\n",
                            "class ndarray:\n    def __eq__(s, o):\n        return s\n    def all(s):\n        return True\n"
                            "    def __iter__(s):\n        return iter([])\n    def __len__(s):\n        return 0\n"
                            "def f():\n    return ndarray()\n"),
}


def test_an_array_compared_with_the_tests_list_or_number_is_compared_elementwise():
    """Right ones scored 0 on each; 1.0 now."""
    assert _each_scored(RIGHT) == dict.fromkeys(RIGHT, 1.0)


def test_wrong_or_empty_arrays_still_fail_elementwise_comparisons():
    assert _each_scored(FORGED) == dict.fromkeys(FORGED, 0.0)
