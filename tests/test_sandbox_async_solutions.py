"""An ``async def`` solution under tests that await it, and a solution importing ``asyncio``.

Two false zeros on main: the audit hook (on by default) refused the import of
``_posixsubprocess``, which ``asyncio`` and ``subprocess`` import, so any solution importing
asyncio scored 0; and the coroutine a call returned stayed a handle in the tests, so
``asyncio.run(f(x))`` raised ValueError. Now ``_posixsubprocess`` is loaded before the hook with a
``fork_exec`` that refuses (``server._no_process_start``), and the sample runs a returned
coroutine to its end in a loop of its own, the tests getting a coroutine giving its answer
(``polyrl.sandbox.awaited_calls``). A third: a solution running its own loop (``asyncio.run`` in a
plain function) scored 0, asyncio's self-pipe being a unix socket pair the hook refused; every
loop's self-pipe is now an ``os.pipe`` (``server._make_self_pipe``) and the hook refuses every socket.
The forged ones (a plain value passed off as awaited, a process started through the neutered
module or a fresh copy of it, a socket reaching out, asyncio's socket pair reached around the pipe)
score 0. Scored through the real reward path."""

from __future__ import annotations

import pytest
from test_sandbox_verdict import score

pytestmark = pytest.mark.faults

_RIGHT = ("import asyncio\nasync def add(a, b):\n    await asyncio.sleep(0.001)\n    if a < 0:\n"
          "        raise ValueError('negative')\n    return a + b\n"
          "class Calc:\n    async def twice(self, x):\n        return [x, x]\n")
_TESTS = {
    "asyncio_run": "import asyncio\nassert asyncio.run(add(1, 2)) == 3\n",
    "awaited_in_an_async_test": ("import pytest\n@pytest.mark.asyncio\nasync def test_add():\n"
                                 "    assert await add(2, 3) == 5\n"),
    "gathered": ("import asyncio\nasync def both():\n    return await asyncio.gather(add(1, 1), add(2, 2))\n"
                 "assert asyncio.run(both()) == [2, 4]\n"),
    "raises": "import asyncio, pytest\nwith pytest.raises(ValueError):\n    asyncio.run(add(-1, 0))\n",
    "method": "import asyncio\nassert asyncio.run(Calc().twice(4)) == [4, 4]\n",
}
#: A sync solution that only imports what imports ``_posixsubprocess``.
_IMPORTS = "import asyncio, subprocess\ndef add(a, b):\n    return a + b\n"

_ESCAPE = ("import os, socket, subprocess, sys, importlib.util\n"
           "def need_socket(end):\n    if isinstance(end, socket.socket):\n        return end\n"
           "    raise PermissionError('a pipe')\n"
           "def fresh_selector_events():\n    import asyncio.selector_events\n"
           "    spec = importlib.util.spec_from_file_location('asyncio.fresh', asyncio.selector_events.__file__)\n"
           "    fresh = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(fresh)\n"
           "    loop = asyncio.new_event_loop()\n    fresh.BaseSelectorEventLoop._make_self_pipe(loop)\n"
           "    return need_socket(loop._ssock)\n"
           "def unpatched_asyncio():\n"
           "    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, '__module__', '') != '__main__']\n"
           "    for name in [n for n in sys.modules if n.split('.')[0] == 'asyncio']:\n"
           "        del sys.modules[name]\n"
           "    return need_socket(__import__('asyncio').new_event_loop()._ssock)\n"
           "def escape():\n    tries = [lambda: subprocess.run(['true']),\n"
           "             lambda: __import__('_posixsubprocess').fork_exec(*[None] * 23),\n"
           "             lambda: importlib.util.module_from_spec(importlib.util.find_spec('_posixsubprocess')),\n"
           "             lambda: (sys.modules.pop('_posixsubprocess'), __import__('_posixsubprocess')),\n"
           "             lambda: socket.socket(socket.AF_INET),\n"
           "             lambda: socket.socket(socket.AF_UNIX),\n"
           "             lambda: socket.socketpair(),\n"
           "             lambda: __import__('_socket').socketpair(1, 2)[0].sendto(b'x', '/dev/log'),\n"
           "             lambda: __import__('_socket').socketpair()[0].connect('/dev/log'),\n"
           "             lambda: need_socket(__import__('asyncio').new_event_loop()._ssock),\n"
           "             fresh_selector_events, unpatched_asyncio]\n"
           "    for i, t in enumerate(tries):\n        try:\n            t()\n        except PermissionError:\n"
           "            continue\n        except BaseException:\n            pass\n        return 'escaped %d' % i\n"
           "    return 'refused'\n")
#: Forged: a plain answer passed off as an awaited one; a route around the audit hook this could open
#: (a process through ``_posixsubprocess``, a socket of the sample's own, an event loop of its own).
_FORGED = {
    "sync_value_for_asyncio_run": ("def add(a, b):\n    return a + b\n", _TESTS["asyncio_run"]),
    "awaitable_object": ("class Later:\n    def __await__(self):\n        return iter([])\n"
                         "def add(a, b):\n    return Later()\n", _TESTS["asyncio_run"]),
    "escapes_the_audit_hook": (_ESCAPE, "assert escape().startswith('escaped')\n"),
}


#: Right solutions running their own event loop in a plain function (``asyncio.run``, a loop of their
#: own woken from a thread through its self-pipe, two runs a call, called 40 times: a leaked pipe
#: would reach the 64 open files); and a wrong one, which still scores 0.
_OWN_LOOP = {
    "gathered_in_asyncio_run": (
        "import asyncio\nasync def _get(url):\n    await asyncio.sleep(0)\n    return url.upper()\n"
        "async def _gather(urls):\n    return await asyncio.gather(*(_get(u) for u in urls))\n"
        "def fetch_all(urls):\n    return asyncio.run(_gather(urls))\n",
        "assert fetch_all(['a', 'b']) == ['A', 'B']\nassert fetch_all([]) == []\n"),
    "woken_from_a_thread": (
        "import asyncio, threading\ndef later(x):\n    loop = asyncio.new_event_loop()\n"
        "    try:\n        done = loop.create_future()\n"
        "        threading.Thread(target=loop.call_soon_threadsafe, args=(done.set_result, x * 2)).start()\n"
        "        return loop.run_until_complete(done)\n    finally:\n        loop.close()\n",
        "assert later(21) == 42\n"),
    "queue_twice_a_call": (
        "import asyncio\nasync def _pipeline(n):\n    q = asyncio.Queue()\n    for i in range(n):\n"
        "        await q.put(i)\n    return [await asyncio.wait_for(q.get(), 60) for _ in range(n)]\n"
        "def total(n):\n    return sum(asyncio.run(_pipeline(n))) + len(asyncio.run(_pipeline(n)))\n",
        "for n in range(40):\n    assert total(n) == n * (n - 1) // 2 + n\n"),
}
_WRONG_OWN_LOOP = ("import asyncio\nasync def _gather(urls):\n    await asyncio.sleep(0)\n"
                   "def fetch_all(urls):\n    return asyncio.run(_gather(urls))\n",
                   _OWN_LOOP["gathered_in_asyncio_run"][1])


def _scored(cases: dict[str, tuple[str, str]], isolation: str = "auto") -> dict[str, float]:
    """Each (solution, tests) case's score by its name, with the audit hook on (the default)."""
    rows = [{"prompt": "p", "tests": tests} for _, tests in cases.values()]
    result = score([code for code, _ in cases.values()], rows=rows, isolation=isolation, audit_hook=True)
    return dict(zip(cases, (float(x) for x in result.total)))


def test_an_async_solution_awaited_by_the_tests_passes():
    """Each scored 0 on main (``import asyncio`` refused; the coroutine a handle)."""
    cases = {name: (_RIGHT, tests) for name, tests in _TESTS.items()}
    cases["imports_asyncio_and_subprocess"] = (_IMPORTS, "assert add(1, 2) == 3\n")
    assert _scored(cases) == dict.fromkeys(cases, 1.0)


def test_a_solution_running_its_own_event_loop_passes():
    """Each scored 0 on integ: asyncio's loop makes its self-pipe with ``socket.socketpair()``,
    which the audit hook refused. Now it is an ``os.pipe`` (``server._make_self_pipe``)."""
    cases = dict(_OWN_LOOP, wrong=_WRONG_OWN_LOOP)
    assert _scored(cases) == dict(dict.fromkeys(_OWN_LOOP, 1.0), wrong=0.0)


def test_forged_awaits_and_escapes_score_zero():
    """Without bubblewrap (``off``) the audit hook is the only wall: nothing this change lets
    through (the preloaded ``_posixsubprocess``, an event loop's pipe self-pipe) starts a process or
    makes a socket of the sample's (whose buffers no rlimit counts): not asyncio's loop made around
    the pipe (a fresh copy of ``selector_events``, asyncio reloaded without the patching finder);
    and a pair from ``_socket.socketpair`` reaches nothing outside (its sends to an address and
    connects are refused events; the pair itself is ``test_a_raw_socket_pair_is_refused``)."""
    assert _scored(_FORGED, isolation="off") == dict.fromkeys(_FORGED, 0.0)
    assert _scored({"escape_refused": (_ESCAPE, "assert escape() == 'refused'\n")}, isolation="off") == \
        {"escape_refused": 1.0}


@pytest.mark.parametrize("isolation", ["off", "auto"])
def test_a_raw_socket_pair_is_refused(isolation):
    """A sample's own unix pair, made without ``socket.socket``: ``_socket.socketpair`` raises no
    audit event (and a fresh copy of the single-phase ``_socket`` module brings the real one back),
    so the hook let it through and the pair scored 1: its ends reached only each other, but
    without the seccomp filter (``off``) its ``setsockopt(SO_SNDBUF)`` raised each buffer to twice
    ``net.core.wmem_max``, kernel memory ``memory_mb`` does not count. Now the kernel refuses
    ``socketpair`` at every level: the full filter (bubblewrap, ``unshare``'s setup) and, where it
    is off, the server's own small one (``memfd_filter``); the sample's own fresh ``_socket`` too."""
    from polyrl.sandbox import memfd_filter

    if isolation == "off" and memfd_filter.program() is None:
        pytest.skip("socketpair's number is known to the small filter for x86_64 and aarch64 only")
    pair = ("import _socket\ndef pair():\n    a, b = _socket.socketpair()\n    a.send(b'x')\n    return b.recv(1)\n"
            "def fresh_pair():\n    import _imp, importlib.util\n"
            "    fresh = _imp.create_dynamic(importlib.util.find_spec('_socket'))\n    return fresh.socketpair()\n",
            "import pytest\nwith pytest.raises(PermissionError):\n    pair()\n")
    fresh = (pair[0], "import pytest\nwith pytest.raises(PermissionError):\n    fresh_pair()\n")
    right = (pair[0], "assert pair() == b'x'\n")
    got = _scored({"refused": pair, "fresh_refused": fresh, "raw_pair": right}, isolation=isolation)
    assert got == {"refused": 1.0, "fresh_refused": 1.0, "raw_pair": 0.0}
