"""pytest cells whose tests take fixtures or xunit setups: each case runs, a right solution scores 1.

Before, a test naming a parametrized fixture (``@pytest.fixture(params=[...])`` read through
``request.param``), a fixture method of its class, a ``name=`` renamed fixture, an ``indirect``
parametrize case, or one relying on ``setup_method``/``setup_class``/``setup_function``/
``setup_module`` was called without them: TypeError or AttributeError for every completion, a right
one too. A fixture nothing here can give (``tmp_path``: the tests run in the trainer, the solution
in its sandbox) is an error naming it, never a silent zero. The reward runs for real: the sandbox,
the harness, the forked copy of the trainer."""

from __future__ import annotations

import pytest
from test_code_cells import EMPTY, RIGHT, WRONG, score

from polyrl.errors import RewardError
from polyrl.rewards.code import parse_tests

pytestmark = pytest.mark.faults

#: right for add(1, 2) only: fails every other case
HALF = "def add(a, b):\n    return 3\n"

CELLS = {
    # one test per param; a marked pytest.param left out, a list bound once at the top read
    "parametrized_fixture": "import pytest\n\nPAIRS = [(1, 2, 3), (2, 2, 4)]\n\n@pytest.fixture(params=PAIRS)\ndef pair(request):\n"
                            "    return request.param\n\n@pytest.fixture(params=[0, pytest.param(5, id='five'), "
                            "pytest.param(7, marks=pytest.mark.skip)])\ndef zero(request):\n    yield request.param\n\n"
                            "def test_pair(pair):\n    a, b, want = pair\n    assert add(a, b) == want\n\n"
                            "def test_zero(zero):\n    assert add(zero, 0) == zero\n",
    # a fixture over a parametrized one, a direct parametrize stacked on a fixture's params
    "fixture_over_params": "import pytest\n\n@pytest.fixture(params=[1, 2])\ndef a(request):\n    return request.param\n\n"
                           "@pytest.fixture\ndef want(a, b):\n    return a + b\n\n@pytest.mark.parametrize('b', [2, 3])\n"
                           "def test_add(a, b, want):\n    assert add(a, b) == want\n",
    "indirect": "import pytest\n\n@pytest.fixture\ndef pair(request):\n    a, b = request.param\n    return a, b, a + b\n\n"
                "@pytest.mark.parametrize('pair', [(1, 2), (2, 2)], indirect=True)\ndef test_add(pair):\n"
                "    a, b, want = pair\n    assert add(a, b) == want\n",
    "renamed_fixture": "import pytest\n\n@pytest.fixture(name='pairs')\ndef make_pairs():\n    return [(1, 2, 3), (2, 2, 4)]\n\n"
                       "def test_add(pairs):\n    for a, b, want in pairs:\n        assert add(a, b) == want\n",
    # a class's own fixtures (one autouse setting self), setup_method and setup_class: one instance per test
    "class_setups": "import pytest\n\nclass TestAdd:\n    @classmethod\n    def setup_class(cls):\n        cls.base = 1\n\n"
                    "    def setup_method(self, method):\n        self.pairs = [(self.base, 2, 3)]\n\n"
                    "    @pytest.fixture(autouse=True)\n    def more(self):\n        self.pairs.append((2, 2, 4))\n        yield\n"
                    "        self.pairs.clear()\n\n    @pytest.fixture\n    def zero(self):\n        return 0\n\n"
                    "    def teardown_method(self):\n        assert not self.pairs\n\n    def test_pairs(self):\n"
                    "        for a, b, want in self.pairs:\n            assert add(a, b) == want\n\n"
                    "    def test_zero(self, zero):\n        assert add(zero, len(self.pairs)) == 2\n",
    "module_setups": "pairs = []\n\ndef setup_module(module):\n    module.pairs.append((1, 2, 3))\n\n"
                     "def setup_function(function):\n    pairs.append((2, 2, 4))\n\ndef teardown_function():\n    pairs.pop()\n\n"
                     "def test_pairs():\n    assert len(pairs) == 2\n    for a, b, want in pairs:\n        assert add(a, b) == want\n\n"
                     "def test_again():\n    assert len(pairs) == 2\n    assert add(*pairs[-1][:2]) == 4\n",
}


@pytest.mark.parametrize("shape", list(CELLS))
def test_every_fixture_shape_runs_its_checks(shape):
    scores, metrics = score(CELLS[shape], [RIGHT, WRONG, EMPTY])
    assert scores == [1.0, 0.0, 0.0], scores
    assert metrics["unconsulted"] == 0


def test_each_param_is_a_test_of_its_own():
    """A solution right on one param of many scores that share, never 1: every param runs."""
    tests = [s for s, t in parse_tests(CELLS["parametrized_fixture"]) if t]
    assert len(tests) == 4 and [s.count("Request('pair', ") for s in tests] == [1, 1, 0, 0]
    assert len([s for s, t in parse_tests(CELLS["fixture_over_params"]) if t]) == 4
    scores, _ = score(CELLS["parametrized_fixture"], [HALF])
    assert scores == [0.25]  # (1, 2) only; (2, 2), zero=0 and zero=5 fail
    scores, _ = score(CELLS["indirect"], [HALF])
    assert scores == [0.5]


def test_a_finalizer_a_fixture_adds_runs_when_its_test_ends():
    cell = ("import pytest\n\nseen = []\n\n@pytest.fixture(params=[1, 2])\ndef x(request):\n"
            "    request.addfinalizer(lambda: seen.append(-request.param))\n    return request.param\n\n"
            "def test_x(x):\n    assert add(x, 0) == x\n    assert -x not in seen\n\n"
            "def test_after():\n    assert seen == [-1, -2]\n    assert add(1, 2) == 3\n")
    scores, _ = score(cell, [RIGHT, WRONG])
    assert scores == [1.0, 0.0]


@pytest.mark.parametrize(("cell", "named"), [
    ("def test_w(tmp_path):\n    assert add(1, 2) == 3\n", "fixture tmp_path"),
    ("class TestW:\n    def test_w(self, tmp_path_factory):\n        assert add(1, 2) == 3\n", "fixture tmp_path_factory"),
    ("def test_w(request):\n    assert add(1, 2) == 3\n", "fixture request"),
    ("import pytest\n\n@pytest.fixture\ndef data(tmpdir):\n    return 1\n\ndef test_w(data):\n    assert add(data, 2) == 3\n",
     "fixture tmpdir, which fixture data\\(\\) names"),
    ("import pytest\n\n@pytest.fixture(autouse=True)\ndef logs(caplog):\n    yield\n\ndef test_w():\n    assert add(1, 2) == 3\n",
     "fixture caplog, which fixture logs\\(\\) names"),
])
def test_a_fixture_nothing_here_gives_is_an_error_naming_it(cell, named):
    """Called without it, the test raised TypeError for every completion: a right one scored 0 and
    nothing said why. ``tmp_path``'s files cannot be given: the tests run in the trainer, the
    solution in its sandbox."""
    with pytest.raises(RewardError, match=rf"the tests of row 3 call \S+\(\) with {named}, which code_tests does "
                                          r"not give .*Fix: rewrite that test without it, or leave the row out"):
        parse_tests(cell, " of row 3")


def test_the_mocks_a_patch_decorator_passes_are_no_fixtures():
    """``@patch('builtins.input')`` hands its mock as the test's first argument, as pytest leaves it."""
    cell = ("from unittest.mock import patch\n\n@patch('builtins.input', return_value='2')\n"
            "@patch('builtins.print', new=print)\ndef test_x(mock_input, capsys):\n    assert add(1, 2) == 3\n")
    assert [s for s, t in parse_tests(cell) if t] == [
        "with __import__('polyrl.sandbox.fixtures', fromlist=['capture']).capture() as _polyrl_capture:\n"
        "    test_x(capsys=_polyrl_capture)"]


def test_params_computed_at_run_time_are_an_error():
    cell = ("import pytest\n\n@pytest.fixture(params=load_cases())\ndef x(request):\n    return request.param\n\n"
            "def test_x(x):\n    assert add(x, 0) == x\n")
    with pytest.raises(RewardError, match=r"give fixture x\(\) params computed at run time \(load_cases\(\)\)"):
        parse_tests(cell)
    ranged = "import pytest\n\n@pytest.mark.parametrize('x', range(-1, 3))\ndef test_x(x):\n    assert add(x, 0) == x\n"
    assert [s for s, t in parse_tests(ranged) if t] == ["test_x(x=-1)", "test_x(x=0)", "test_x(x=1)", "test_x(x=2)"]


SKIP = "pytest.param(1, marks=pytest.mark.skip)"


@pytest.mark.parametrize("cell", [
    f"import pytest\n\n@pytest.mark.parametrize('x', [{SKIP}, pytest.param(2, marks=pytest.mark.xfail)])\n"
    "def test_x(x):\n    assert add(x, 0) == x\n",
    "import pytest\n\n@pytest.mark.parametrize('x', [])\ndef test_x(x):\n    assert add(x, 0) == x\n",
    f"import pytest\n\n@pytest.fixture(params=[{SKIP}])\ndef x(request):\n    return request.param\n\n"
    "def test_x(x):\n    assert add(x, 0) == x\n",
    f"import pytest\n\nclass TestX:\n    @pytest.mark.parametrize('x', [{SKIP}])\n    def test_x(self, x):\n"
    "        assert add(x, 0) == x\n",
])
def test_a_test_with_no_case_that_runs_is_an_error_saying_so(cell):
    """A runner runs no case of it, so every completion would pass: refused, as before, but the
    error said the test needed "fixture x, which code_tests does not give" (its parametrize
    argument) or that "nothing calls" it (a test_* function a runner finds)."""
    with pytest.raises(RewardError, match=r"the tests of row 3 define \S+\(\), whose every parametrize case or "
                                          r"fixture param is marked skip or xfail .*a runner runs no case") as info:
        parse_tests(cell, " of row 3")
    assert "does not give" not in str(info.value) and "nothing calls" not in str(info.value)


def test_a_test_with_no_case_that_runs_beside_others_is_left_out():
    """As pytest: its cases are skipped, the other tests run (it was an error naming a fixture)."""
    cell = (f"import pytest\n\n@pytest.mark.parametrize('x', [{SKIP}])\ndef test_x(x):\n    assert add(x, 0) == x\n\n"
            "def test_y():\n    assert add(1, 2) == 3\n")
    assert [s for s, t in parse_tests(cell) if t] == ["test_y()"]
