"""FALSE ZEROS: right solutions returning (or given) a standard value the harness left in the sample.

A ``datetime.date``/``datetime``/``time``/``timedelta``, a ``range`` or a ``bytearray`` the
solution returned stayed a handle in the sample, equal to nothing of the tests', so a right
``parse_date(s)`` failed ``== date(2020, 1, 2)`` (0.0); and the tests could not send one
(``days(date(2020, 1, 1), date(2020, 1, 5))``: 0.0). Each now crosses as plain data, rebuilt on
the other side as that side's own type (``standard_values.POSITIONAL``, ``CONSTRUCTED``,
``REBUILT``), so a sample's class named like one (``__module__ = 'datetime'``) sends ints or
bytes and is compared as the real type built from them: its ``__eq__`` never runs.
Scored through the real reward path (``code_tests``: sandbox, harness, the forked trainer copy).
"""

from __future__ import annotations

import datetime

import pytest
from test_sandbox_emptied_values import _each_scored

pytestmark = pytest.mark.faults

#: (tests, right solution).
RIGHT = {
    "date_returned": ("import datetime\nassert f() == datetime.date(2020, 1, 2)\nassert f().year == 2020\n",
                      "import datetime\ndef f():\n    return datetime.date(2020, 1, 2)\n"),
    "dates_passed": ("from datetime import date\nassert days(date(2020, 1, 1), date(2020, 1, 5)) == 4\n",
                     "def days(a, b):\n    return (b - a).days\n"),
    "datetime_parsed": ("from datetime import datetime\nassert parse('2020-01-02 03:04') == datetime(2020, 1, 2, 3, 4)\n",
                        "from datetime import datetime\ndef parse(s):\n    return datetime.strptime(s, '%Y-%m-%d %H:%M')\n"),
    "aware_datetime_passed": ("from datetime import datetime, timezone\n"
                              "assert f(datetime(2020, 1, 1, tzinfo=timezone.utc)) == 2020\n",
                              "def f(d):\n    assert d.utcoffset().total_seconds() == 0\n    return d.year\n"),
    "timedelta_returned": ("from datetime import timedelta\nassert gap(3) == timedelta(days=3)\n",
                           "from datetime import timedelta\ndef gap(n):\n    return timedelta(days=n)\n"),
    "time_returned": ("import datetime\nassert t() == datetime.time(3, 4)\n",
                      "import datetime\ndef t():\n    return datetime.time(3, 4)\n"),
    "range_returned": ("assert r(3) == range(3)\nassert list(r(3)) == [0, 1, 2]\n", "def r(n):\n    return range(n)\n"),
    "bytearray_returned": ("assert enc('a') == b'a'\nassert enc('a') == bytearray(b'a')\n",
                           "def enc(s):\n    return bytearray(s.encode())\n"),
    "bytearray_passed": ("assert n(bytearray(b'ab')) == 2\n", "def n(b):\n    return len(b)\n"),
}
#: (tests, forged solution): classes named like the standard ones, equal to everything.
FORGED = {
    "date_named": ("import datetime\nassert f() == datetime.date(2020, 1, 2)\n",
                   "class date:\n    year, month, day = 2020, 1, 3\n    def __eq__(s, o):\n        return True\n"
                   "date.__module__ = 'datetime'\ndef f():\n    return date()\n"),
    "range_named": ("assert r(3) == range(3)\n",
                    "class range:\n    start, stop, step = 0, 4, 1\n    def __eq__(s, o):\n        return True\n"
                    "range.__module__ = 'builtins'\ndef r(n):\n    return range()\n"),
    "date_out_of_range": ("import datetime\nassert f() == datetime.date(2020, 1, 2)\n",
                          "class date:\n    year, month, day = 2020, 13, 3\n    def __eq__(s, o):\n        return True\n"
                          "date.__module__ = 'datetime'\ndef f():\n    return date()\n"),
}


def test_right_solutions_with_standard_values_keep_full_marks():
    assert _each_scored(RIGHT) == dict.fromkeys(RIGHT, 1.0)


def test_classes_named_like_standard_values_are_compared_as_the_real_type():
    assert _each_scored(FORGED) == dict.fromkeys(FORGED, 0.0)


def test_positional_values_are_rebuilt_from_ints_only():
    from polyrl.sandbox.standard_values import rebuilt
    from polyrl.sandbox.values import ProtocolError

    assert rebuilt("datetime", "date", (2020, 1, 2)) == datetime.date(2020, 1, 2)
    assert rebuilt("builtins", "range", (0, 9, 3)) == range(0, 9, 3)
    assert rebuilt("builtins", "bytearray", b"ab") == bytearray(b"ab")
    for module, name, plain in [("datetime", "date", (2020, 13, 1)), ("datetime", "date", (2020, 1)),
                                ("datetime", "date", (2020.0, 1, 2)), ("datetime", "date", [2020, 1, 2]),
                                ("builtins", "range", (0, 1, 0)), ("builtins", "bytearray", "ab")]:
        with pytest.raises(ProtocolError):
            rebuilt(module, name, plain)
