"""A sample that rewrites its own server, or answers the trainer's channel itself.

The server runs in the sample's interpreter as ``__main__``, so a sample can patch it
(``__main__._Session.handle``; also reachable as ``os.write.__globals__``, ``sys._getframe(1)`` inside a
call, ``gc.get_objects()``), or skip it: read the requests from descriptor 3 and write answers to 4
itself. No hiding of the server's objects inside that one process closes the second way, so every
answer from the sample's process is the sample's word. Scoring is sound only because no request
carries a value the tests expect (``remote.Remote._equals_plain``, ``_compare``): the first test
pins that from where a patched server stands. The second records what such a sample does get: the
class facts the server reads from ``type`` itself (``server._subtype``), which it can claim; a real
``class Fake(Stack)`` passes the same test in Python, so that gains it no score a wrong solution
could not get by writing its classes.
"""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits

pytestmark = pytest.mark.faults

#: Logs every request the trainer sends (to stderr, the sample's captured output), then answers as the server does.
SPY = ("import __main__, os\n_handle = __main__._Session.handle\n"
       "def handle(self, req):\n    os.write(2, ('REQ %r\\n' % (req,)).encode())\n    return _handle(self, req)\n"
       "__main__._Session.handle = handle\n")
#: A wrong solution whose answers agree with everything they can.
ANY = ("class Any:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
       "    def __int__(self):\n        return 7\n    def __float__(self):\n        return 7.5\n"
       "    def __str__(self):\n        return 'seven'\n    def __iter__(self):\n        return iter([Any(), Any()])\n"
       "    def __len__(self):\n        return 2\n    def __lt__(self, o):\n        return True\n"
       "    __le__ = __gt__ = __ge__ = __lt__\n    def __sub__(self, o):\n        return Any()\n"
       "    __rsub__ = __add__ = __radd__ = __abs__ = __sub__\ndef area(r):\n    return Any()\ngreet = mid = ordered = area\n")
#: Values of the tests' own, each written nowhere but in what they expect.
EXPECTED = ("12.625", "99.5", "hello-zq", "1.75", "77")
TESTS = ("assert area(2) == 12.625\nassert abs(area(2) - 12.625) < 1e-3\nassert area(2) in [12.625, 99.5]\n"
         "assert greet('a') == 'hello-zq'\nassert mid((0, 0), (2, 2)) == (1, 1.75)\nassert ordered([3, 1]) == [1, 3, 77]\n"
         "assert list(ordered([3, 1])) == [1, 3, 77]\nassert area(2) > 12.625 and area(2) < 12.625\n")


def test_a_sample_that_rewrites_its_server_sees_no_value_the_tests_expect():
    """Every request the trainer sends, as a patched server logs it: none names an expected value
    (a literal compared with, in a list, an ordering bound), so the answers cannot be made to fit
    them, and every test fails."""
    box = Sandbox(SandboxLimits(timeout_s=8), isolation="auto", audit_hook=False)
    result = box.run(SPY + ANY, parse_tests(TESTS, ""))
    assert "REQ {'op': 'call'" in result.output, result  # the patch took: it saw the requests
    assert result.passed == [False] * 8
    assert [v for v in EXPECTED if v in result.output] == []


#: Speaks the channel itself: no object of the server's is touched.
TAKEOVER = ("import os, marshal, json\nclass Stack:\n    pass\nclass Fake:\n    pass\ndef make():\n    return Fake()\n"
            "def _exactly(n):\n    d = b''\n    while len(d) < n:\n        c = os.read(3, n - len(d))\n"
            "        if not c:\n            os._exit(0)\n        d += c\n    return d\n"
            "def _send(m):\n    os.write(4, (json.dumps(m) + '\\n').encode())\n"
            "_send({'ok': True, 'v': {'Stack': ['r', 0, 'callable', 'type'], 'make': ['r', 1, 'callable', 'function']},"
            " 'fds': []})\n"
            "while True:\n    req = marshal.loads(_exactly(int.from_bytes(_exactly(8), 'big')))\n"
            "    _send({'ok': True, 'v': ['r', 2, 'object', 'Fake'] if req['op'] == 'call' else ['b', True]})\n")
PATCHED = ("import __main__\n_handle = __main__._Session.handle\n"
           "def handle(self, req):\n    if req['op'] in ('isinstance', 'compare'):\n        return self.out(True)\n"
           "    return _handle(self, req)\n__main__._Session.handle = handle\n"
           "class Stack:\n    pass\nclass Fake:\n    pass\ndef make():\n    return Fake()\n")


@pytest.mark.xfail(strict=True, reason="the sample's process answers every request: it can patch its server or "
                   "speak the channel (descriptors 3 and 4) itself, so a class fact the server reads from type "
                   "(server._subtype) is its word; harmless to scoring, as class Fake(Stack) passes the same test")
def test_a_sample_that_answers_for_its_server_cannot_claim_a_class_it_is_not_of():
    tests = "assert isinstance(make(), Stack)\n"
    forged = {"patched_server": PATCHED, "channel_taken_over": TAKEOVER}
    result = score(list(forged.values()), rows=[{"prompt": "p", "tests": tests}] * len(forged))
    assert dict(zip(forged, map(float, result.total))) == dict.fromkeys(forged, 0.0)
