"""pandas DataFrames, Series and Indexes crossing the sandbox as plain data: a false zero on main.

A right solution returning a DataFrame or Series kept it in the sample, so ``df.equals(e)``,
``pd.testing.assert_frame_equal``, ``(f() == e).all().all()``, ``assert_series_equal`` and
``isinstance(f(), pd.DataFrame)`` all failed it, and a test's DataFrame argument "cannot be sent"
(0.0). Each side now rebuilds the other's exactly from plain data (``pandas_values``): the same
dtypes, index and names, so a dtype or index that differs fails where pandas' own check fails,
and a wrong solution posing as a DataFrame still scores 0. Scored through the real reward path
(``code_tests``: bubblewrap sandbox, harness, the forked copy of the trainer)."""

from __future__ import annotations

import decimal

import pytest
from test_sandbox_verdict import user_for

from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.sandbox.harness import Session
from polyrl.sandbox.pandas_values import pandas_made, pandas_plain
from polyrl.sandbox.values import ProtocolError, decode, encode
from polyrl.types import Completion, RewardContext

pd = pytest.importorskip("pandas", reason="needs pandas (the tests and solutions use it)")
np = pytest.importorskip("numpy")
pytestmark = pytest.mark.faults


def _score(rows: list[dict[str, str]], texts: list[str]) -> list[float]:
    """``code_tests`` of each (row, completion), with room for pandas' import in the sample."""
    options = {"timeout_s": 20, "memory_mb": 2048, "max_output_bytes": 16384, "isolation": "auto",
               "audit_hook": False, "extract": "raw", "setup_column": "setup", "user": user_for("auto")}
    computer = RewardComputer(get_plugin_manager(entry_points=False), [("code_tests", 1.0, options)])
    comps = [Completion(0, [1], [2], [0.0], text=t) for t in texts]
    return list(computer([r["prompt"] for r in rows], comps, RewardContext(rows=rows, wanted=("code_tests",))).total)


def _each(cases: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Each (tests, solution) case's score by its name."""
    rows = [{"prompt": "p", "tests": tests} for tests, _ in cases.values()]
    return dict(zip(cases, _score(rows, [solution for _, solution in cases.values()])))


@pytest.fixture(scope="module", autouse=True)
def _sandbox_imports_pandas() -> None:
    """The sandbox's interpreter must import pandas for any of this to mean something."""
    if _score([{"prompt": "p", "tests": "assert ok() == 1"}], ["import pandas\ndef ok():\n    return 1\n"]) != [1.0]:
        pytest.skip("the sandbox's interpreter cannot import pandas")


#: Values of every kind of the allow-list, each rebuilt exactly.
def _kinds() -> dict[str, object]:
    when = np.array(["2020-01-01", "NaT", "2021-06-30T12:00"], dtype="datetime64[ns]")
    return {
        "numbers": pd.DataFrame({"i8": np.array([1, -2, 3], dtype="int8"), "u64": np.array([0, 2**64 - 1, 5], "uint64"),
                                 "f32": np.array([0.5, np.nan, -0.0], "float32"), "f": [1.5, float("inf"), -0.0],
                                 "b": [True, False, True]}),
        "text": pd.DataFrame({"s": ["x", None, "z"], "o": pd.Series(["a", 1, None], dtype=object),
                              "sp": pd.Series(["a", None, "c"], dtype="string"),
                              "sa": pd.Series(["a", "b", None], dtype=pd.StringDtype("python", na_value=np.nan))}),
        "times": pd.DataFrame({"ns": when, "us": when.astype("datetime64[us]")}, index=pd.Index([3, 1, 2], name="k")),
        "category": pd.DataFrame({"c": pd.Categorical(["lo", "hi", None, "lo"], categories=["lo", "hi"], ordered=True),
                                  "n": pd.Categorical([1, 2, 1, 1])}),
        "duplicate_columns": pd.DataFrame([[1, 2], [3, 4]], columns=["a", "a"], index=["r", "r"]),
        "int_columns": pd.DataFrame([[1.0, 2.0]]),
        "empty": pd.DataFrame(),
        "no_rows": pd.DataFrame({"a": pd.Series([], dtype="float64")}),
        "date_index": pd.DataFrame({"v": [1, 2, 3]}, index=pd.date_range("2020-01-01", periods=3, freq="D", name="d")),
        "range_index": pd.DataFrame({"v": [1, 2]}, index=pd.RangeIndex(10, 14, 2, name="r")),
        "series": pd.Series([1.0, 2.0], index=pd.Index(["a", "b"], name="key"), name="v"),
        "series_int_name": pd.Series([True], name=3),
        "index": pd.Index(["a", "b"], name="n"),
        "range": pd.RangeIndex(5),
    }


@pytest.mark.parametrize("name", list(_kinds()))
def test_each_kind_is_rebuilt_exactly(name):
    """Through the very encoding the channel carries: dtypes, index type, names and values alike."""
    value = _kinds()[name]
    made = pandas_made(decode(encode(pandas_plain(value))))
    assert type(made) is type(value)
    if isinstance(value, pd.DataFrame):
        pd.testing.assert_frame_equal(made, value, check_exact=True, check_index_type=True, check_column_type=True,
                                      check_freq=True, check_flags=True)
        assert list(made.dtypes) == list(value.dtypes) and made.equals(value)
    elif isinstance(value, pd.Series):
        pd.testing.assert_series_equal(made, value, check_exact=True, check_index_type=True, check_freq=True)
    else:
        pd.testing.assert_index_equal(made, value, exact=True)


@pytest.mark.parametrize("value", [
    pd.DataFrame({"a": [1]}, index=pd.MultiIndex.from_tuples([(1, 2)])),
    pd.DataFrame({"a": pd.array([1, None], dtype="Int64")}),
    pd.DataFrame({"t": pd.to_datetime(["2020-01-01"]).tz_localize("UTC")}),
    pd.DataFrame({"d": [decimal.Decimal("1.5")]}),
    type("Frame", (pd.DataFrame,), {})({"a": [1]}),
], ids=["multi_index", "nullable_int", "aware_datetime", "decimal_object", "subclass"])
def test_values_outside_the_allow_list_are_not_described(value):
    data = pandas_plain(value)
    assert data is None or encode(data) is None


@pytest.mark.parametrize("plain", [
    ("frame", ("range", None, 0, 2, 1), [("int64", [1, 2])], ("range", None, 0, 2, 1)),  # 2 columns named, 1 sent
    ("series", None, "int64", [1, 2], ("range", None, 0, 3, 1)),  # 2 values, 3 labels
    ("series", None, "int64", [1.5], ("range", None, 0, 1, 1)),
    ("series", None, "complex128", [1], ("range", None, 0, 1, 1)),
    ("series", None, "int8", [300], ("range", None, 0, 1, 1)),
    ("series", ["unhashable"], "int64", [1], ("range", None, 0, 1, 1)),
    ("series", None, "category", ([5], ("index", None, "int64", [1], None), False), ("range", None, 0, 1, 1)),
    ("index", None, "datetime64[ns]", [0], "D; import os"),
    ("index", None, "object", [1], "D"),
    ("frame", "columns"),
    ("pickle", b"cos\nsystem\n"),
])
def test_a_malformed_value_of_the_sample_is_a_protocol_error(plain):
    """What the sample sends is checked item by item: nothing of it is run, unpickled or evaluated."""
    with pytest.raises(ProtocolError):
        pandas_made(plain)


def test_a_pandas_value_outside_the_allow_list_cannot_be_sent_to_the_sample():
    session = Session(None)
    with pytest.raises(TypeError, match="cannot be sent"):
        session.arg(pd.DataFrame({"a": [1]}, index=pd.MultiIndex.from_tuples([(1, 2)])))
    assert session.arg(pd.Series([1]))[0] == "P"


_FRAME = "pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"
_RIGHT = ("import pandas as pd\n"
          f"def table():\n    return {_FRAME}\n"
          "def column():\n    return pd.Series([1.0, 2.5], name='v')\n"
          "def labels():\n    return pd.Index(['p', 'q'], name='n')\n"
          "def doubled(df):\n    return df * 2\n"
          "def kinds(df):\n    return {c: str(t) for c, t in df.dtypes.items()} | {'index': type(df.index).__name__}\n"
          "def total(s):\n    return float(s.sum())\n")
#: The false zeros: each scored 0.0 on main.
_TESTS = {
    "equals": f"import pandas as pd\nassert table().equals({_FRAME})\n",
    "assert_frame_equal": f"import pandas as pd\npd.testing.assert_frame_equal(table(), {_FRAME})\n",
    "elementwise": f"import pandas as pd\nassert (table() == {_FRAME}).all().all()\n",
    "assert_series_equal": "import pandas as pd\npd.testing.assert_series_equal(column(), pd.Series([1.0, 2.5], name='v'))\n",
    "isinstance": "import pandas as pd\nassert isinstance(table(), pd.DataFrame) and type(column()) is pd.Series\n",
    "columns_and_shape": "assert list(table().columns) == ['a', 'b'] and table().shape == (2, 2)\n",
    "index": "import pandas as pd\nassert labels().equals(pd.Index(['p', 'q'])) and labels().name == 'n'\n",
    "frame_argument": ("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]}, dtype='int8')\n"
                       "pd.testing.assert_frame_equal(doubled(df), pd.DataFrame({'a': [2, 4]}, dtype='int8'))\n"),
    "argument_kept_exactly": ("import pandas as pd\nimport numpy as np\n"
                              "df = pd.DataFrame({'a': np.array([1], 'uint16'), 'b': ['x']}, index=pd.Index([7]))\n"
                              "assert kinds(df) == {'a': 'uint16', 'b': 'str', 'index': 'Index'}\n"),
    "series_argument": "import pandas as pd\nassert total(pd.Series([1.5, 2.5])) == 4.0\n",
}


def test_a_right_pandas_solution_scores_one():
    assert _each({name: (tests, _RIGHT) for name, tests in _TESTS.items()}) == dict.fromkeys(_TESTS, 1.0)


_POSING = ("class DataFrame:\n    columns = ['a', 'b']\n    shape = (2, 2)\n    def __eq__(self, other):\n        return True\n"
           "    def equals(self, other):\n        return True\n    def all(self):\n        return self\n"
           "    def __bool__(self):\n        return True\n")
_SUBCLASS = ("import pandas as pd\nclass Frame(pd.DataFrame):\n    def equals(self, other):\n        return True\n"
             "    def __eq__(self, other):\n        return pd.DataFrame({'a': [True, True], 'b': [True, True]})\n")
#: Wrong ``table``s, each against every check of ``_TESTS`` that reads it: each must score 0.
_FORGED = {
    "named_dataframe": _POSING + "def table():\n    return DataFrame()\n",
    "subclass_overriding_methods": _SUBCLASS + "def table():\n    return Frame({'a': [9, 9], 'b': ['z', 'z']})\n",
    "subclass_of_the_right_values": _SUBCLASS + "def table():\n    return Frame({'a': [1, 2], 'b': ['x', 'y']})\n",
}
_READ_BY_FORGERIES = ("equals", "assert_frame_equal", "elementwise", "isinstance")


def test_a_wrong_solution_posing_as_a_dataframe_scores_zero():
    """A class named DataFrame whose ``==`` and ``equals`` say yes, or a subclass of pandas' with
    such methods (of the right values too: it is no DataFrame to the tests), stays a handle here;
    its own ``equals`` is never handed the tests' DataFrame."""
    cases = {f"{forged}/{test}": (_TESTS[test], code) for forged, code in _FORGED.items() for test in _READ_BY_FORGERIES}
    cases["reflected"] = (f"import pandas as pd\nassert ({_FRAME} == table()).all().all()\n", _FORGED["named_dataframe"])
    assert _each(cases) == dict.fromkeys(cases, 0.0)


#: (the solution's frame, the tests' check of it against ``_EXPECTED``): dtypes and indexes that differ.
_EXPECTED = "pd.DataFrame({'a': [1, 2]}, index=pd.RangeIndex(2))"
_MISMATCHES = {
    "int32_default": ("pd.DataFrame({'a': [1, 2]}, dtype='int32')", "pd.testing.assert_frame_equal(r, e)"),
    "int32_unchecked": ("pd.DataFrame({'a': [1, 2]}, dtype='int32')", "pd.testing.assert_frame_equal(r, e, check_dtype=False)"),
    "int32_equals": ("pd.DataFrame({'a': [1, 2]}, dtype='int32')", "assert r.equals(e)"),
    "float_values": ("pd.DataFrame({'a': [1.0, 2.0]})", "pd.testing.assert_frame_equal(r, e)"),
    "index_equiv": ("pd.DataFrame({'a': [1, 2]}, index=pd.Index([0, 1]))", "pd.testing.assert_frame_equal(r, e)"),
    "index_exact": ("pd.DataFrame({'a': [1, 2]}, index=pd.Index([0, 1]))",
                    "pd.testing.assert_frame_equal(r, e, check_index_type=True)"),
    "index_values": ("pd.DataFrame({'a': [1, 2]}, index=[1, 2])", "pd.testing.assert_frame_equal(r, e)"),
    "object_strings": ("pd.DataFrame({'a': pd.Series(['1', '2'], dtype=object)})", "assert (r.astype(int) == e).all().all()"),
    "named_index": ("pd.DataFrame({'a': [1, 2]}, index=pd.RangeIndex(2, name='i'))", "pd.testing.assert_frame_equal(r, e)"),
}


def _pandas_says(made: str, check: str) -> bool:
    """Whether ``check`` holds of ``made`` as ``r`` here, in pandas itself."""
    try:
        exec(check, {"pd": pd, "r": eval(made, {"pd": pd}), "e": eval(_EXPECTED, {"pd": pd})})
    except AssertionError:
        return False
    return True


def test_a_right_frame_of_another_dtype_or_index_fails_where_pandas_fails():
    """The rebuilt frame is the sample's exactly, so each check passes or fails as it does in pandas."""
    cases = {name: (f"import pandas as pd\ne = {_EXPECTED}\nr = table()\n{check}\n",
                    f"import pandas as pd\ndef table():\n    return {made}\n")
             for name, (made, check) in _MISMATCHES.items()}
    want = {name: float(_pandas_says(made, check)) for name, (made, check) in _MISMATCHES.items()}
    assert set(want.values()) == {0.0, 1.0}  # both ways among them
    assert _each(cases) == want


def _khash_colliding(n: int) -> list[int]:
    """``n`` distinct int64s of one pandas khash ``(k >> 33) ^ k ^ (k << 11)`` (mod 2**32): sums of its kernel."""
    def khash(k: int) -> int:
        return ((k >> 33) ^ k ^ (k << 11)) & 0xFFFFFFFF
    pivots: dict[int, tuple[int, int]] = {}
    kernel = []
    for bit in range(64):
        h, k = khash(1 << bit), 1 << bit
        for top, (ph, pk) in sorted(pivots.items(), reverse=True):
            if h >> top & 1:
                h, k = h ^ ph, k ^ pk
        if h:
            pivots[h.bit_length() - 1] = (h, k)
        else:
            kernel.append(k)
    keys = []
    for i in range(1, n + 1):
        k = 0
        for j, v in enumerate(kernel):
            if i >> j & 1:
                k ^= v
        keys.append(k - (1 << 64) if k >= 1 << 63 else k)
    assert len(set(keys)) == n and len({khash(k % (1 << 64)) for k in keys}) == 1
    return keys


_PILED = _khash_colliding(2000)
#: ints of one Python hash folded to 32 bits (``(h >> 32) ^ h``), as pandas' object tables fold it
_FOLDED = [(a << 32) | (a ^ 12345) for a in range(1, 2001)]


@pytest.mark.parametrize("plain", [
    ("series", None, "int64", _PILED, ("range", None, 0, len(_PILED), 1)),
    ("index", None, "int64", _PILED, None),
    ("index", None, "datetime64[ns]", _PILED, None),
    ("series", None, "uint64", [k % (1 << 64) for k in _PILED], ("range", None, 0, len(_PILED), 1)),
    ("frame", ("range", None, 0, 1, 1), [("float64", [1.0] * len(_PILED))], ("index", None, "int64", _PILED, None)),
    ("series", None, "int64", _FOLDED, ("range", None, 0, len(_FOLDED), 1)),
    ("series", None, "object", _FOLDED, ("range", None, 0, len(_FOLDED), 1)),
], ids=["int_column", "int_index", "datetime_index", "uint_column", "frame_index", "folded_ints", "folded_objects"])
def test_values_built_to_collide_in_pandas_hash_tables_are_refused(plain):
    """Distinct keys of one khash made ``value_counts``, ``is_unique`` and ``get_loc`` quadratic in
    the trainer (20k: seconds; one message holds 250k): refused as malformed, the sample crashed."""
    with pytest.raises(ProtocolError, match="collide"):
        pandas_made(decode(encode(plain)))
    assert pandas_plain(pd.Series(_PILED)) is None  # nor described by an honest side


@pytest.mark.parametrize("value", [
    pd.Series(range(100000)),
    pd.DataFrame({"r": np.random.default_rng(0).integers(-2**62, 2**62, 100000),
                  "f": np.random.default_rng(1).random(100000), "n": [np.nan] * 100000,
                  "t": pd.date_range("2000-01-01", periods=100000, freq="min")}, index=pd.Index(range(100000, 0, -1))),
    pd.Index(np.arange(0, 2**40, 2**20, dtype="uint64")),
    pd.Series([float(i) for i in range(50000)] + [-0.0, 0.0], dtype=object),
], ids=["range", "random_frame", "uint_index", "object_floats"])
def test_ordinary_large_values_still_cross(value):
    made = pandas_made(decode(encode(pandas_plain(value))))
    assert type(made) is type(value) and made.equals(value)


@pytest.mark.parametrize("value", [
    pd.Series(pd.Categorical(pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-01"]))),
    pd.Series(pd.Categorical.from_codes([0, 2], dtype=pd.CategoricalDtype(pd.RangeIndex(3)))),
    pd.DataFrame({"v": [1, 2]}, index=pd.date_range("2020-01-01", periods=2, freq=pd.DateOffset(days=2))),
], ids=["datetime_categories", "range_categories", "date_offset_freq"])
def test_what_pandas_made_refuses_is_not_described(value):
    """It stays a handle, as other kinds outside the allow-list do, instead of a malformed value there."""
    assert pandas_plain(value) is None


def test_a_right_category_of_datetimes_is_not_a_crash():
    code = ("import pandas as pd\ndef days():\n"
            "    return pd.Series(pd.Categorical(pd.to_datetime(['2020-01-01', '2020-01-02', '2020-01-01'])))\n")
    assert _each({"len": ("assert len(days()) == 3\n", code)}) == {"len": 1.0}
