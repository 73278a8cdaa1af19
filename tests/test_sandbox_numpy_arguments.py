"""A numpy array or scalar the tests pass to the solution (``double(np.array([1, 2]))``): a false zero on main.

The tests' array could not be sent ("a ndarray cannot be sent to the sample (only plain data)"),
so a right numpy solution failed every such test. An array of numbers, bools or strs, or such a
scalar, now crosses as its items and dtype and the sample's numpy makes its own
(``standard_values.numpy_constructed``). Scored through the real reward path (``code_tests``)."""

from __future__ import annotations

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults
pytest.importorskip("numpy", reason="needs numpy (the tests pass numpy arrays)")

_RIGHT = ("import numpy as np\ndef double(a):\n    return a * 2\n"
          "def normalize(a):\n    return a / np.linalg.norm(a, axis=1, keepdims=True)\n"
          "def half(x):\n    return x / 2\ndef kind(a):\n    return str(a.dtype)\n")
_TESTS = {
    "array_equal": "import numpy as np\nassert np.array_equal(double(np.array([1, 2])), np.array([2, 4]))\n",
    "two_dimensions": "import numpy as np\nassert np.allclose(normalize(np.array([[3.0, 4.0]])), [[0.6, 0.8]])\n",
    "scalars": "import numpy as np\nassert half(np.float64(3.0)) == 1.5 and half(np.int64(4)) == 2\n",
    "dtype_kept": ("import numpy as np\nassert kind(np.array([1, 2], dtype=np.int8)) == 'int8'\n"
                   "assert kind(np.array([True])) == 'bool' and kind(np.array(['ab'])) == '<U2'\n"),
}
#: Wrong ``double``s against ``array_equal``: each scores 0.
_FORGED = {
    "input_back": "def double(a):\n    return a\n",
    "equal_to_anything": ("class Any:\n    def __eq__(self, other):\n        return True\n    def __array__(self, *a, **k):\n"
                          "        raise TypeError\ndef double(a):\n    return Any()\n"),
    "exit_zero": "import sys\ndef double(a):\n    sys.exit(0)\n",
}


def test_a_numpy_array_the_tests_pass_reaches_the_solution():
    """Each scored 0 on main (TypeError: a ndarray cannot be sent to the sample)."""
    assert _each_scored({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


def test_a_wrong_solution_given_a_numpy_array_scores_zero():
    tests = _TESTS["array_equal"]
    assert _each_scored({name: (tests, code) for name, code in _FORGED.items()}) == dict.fromkeys(_FORGED, 0.0)
