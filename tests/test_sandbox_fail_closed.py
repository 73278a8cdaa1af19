"""The code sandbox fails closed: without a strong level (bubblewrap) the default refuses with one
error naming what is missing and the opt-in; the weaker levels are an explicit ``isolation =
"weak"``; the strict mode needs the seccomp filter; the filter refuses socket families that escape
a network namespace (AF_VSOCK); the sample's bounding set is empty. The machines without bubblewrap
or user namespaces are simulated with a PATH whose ``bwrap`` / ``unshare`` are missing or fail, as
they fail there."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from bwrap_util import needs_bwrap
from polyrl.errors import ConfigError, RewardError
from polyrl.rewards.code import check_options, parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, runner, seccomp

TESTS = parse_tests("assert add(1, 2) == 3\nassert add(1, 1) == 3\n")
HALF = "def add(a, b):\n    return a + b\n"
REFUSED = "Operation not permitted"


def _fake_path(tmp_path, monkeypatch, *, bwrap: str | None = None, unshare: str | None = "real") -> None:
    """PATH with setpriv/choom and, as asked, no bwrap (None), a bwrap that fails with ``bwrap``,
    and a real, missing (None) or failing unshare."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("setpriv", "choom") + (("unshare",) if unshare == "real" else ()):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    for name, says in (("bwrap", bwrap), ("unshare", None if unshare == "real" else unshare)):
        if says is not None:
            (bin_dir / name).write_text(f"#!/bin/sh\necho '{name}: {says}' >&2\nexit 1\n")
            (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(runner, "_launches", {})
    monkeypatch.setattr(runner.isolation, "_probes", {})
    monkeypatch.setattr(runner.isolation, "_starts", {}, raising=False)


def _nobody_python() -> str | None:
    """An interpreter the sandbox may run as the sample's user (a root trainer's own under /root is not)."""
    from polyrl.sandbox import isolation

    for python in (os.path.realpath(shutil.which("python3") or "/usr/bin/python3"), "/usr/bin/python3"):
        if not os.path.exists(python):
            continue
        if os.geteuid() != 0:
            return python
        ask = [python, "-I", "-c", isolation._IDENTITY]
        expected = subprocess.run(ask, capture_output=True, text=True).stdout.strip()
        if isolation.probe(isolation.drop_privileges((65534, 65534)) + ask, expected) is None:
            return python
    return None


@pytest.mark.faults
def test_default_refuses_without_bubblewrap_naming_the_install_and_the_opt_in(tmp_path, monkeypatch):
    """"auto" fell back with one warning to unshare / a plain subprocess, where a non-root trainer's
    sample is the trainer's own uid: it read ~/.netrc, wrote the run folder and, at "off", read the
    trainer's memory (a forged 1.0). Now it is an error at setup."""
    _fake_path(tmp_path, monkeypatch)
    for isolation in ("auto", "require"):
        with pytest.raises(RewardError) as err:
            Sandbox(SandboxLimits(timeout_s=3), isolation=isolation)
        text = str(err.value)
        assert f'isolation = "{isolation}" needs bubblewrap' in text and "bwrap not found" in text, text
        assert "Fix: install bubblewrap" in text and 'isolation = "weak"' in text, text
    monkeypatch.setattr("polyrl.rewards.code._sandboxes", {})  # none an earlier test built with bwrap
    with pytest.raises(RewardError, match="bwrap not found.*Fix: install bubblewrap"):
        check_options("code_tests", {})
    from polyrl.plugins import get_plugin_manager
    from polyrl.rewards.combine import RewardComputer

    with pytest.raises(ConfigError) as err:  # when the run is set up, before any model loads
        RewardComputer(get_plugin_manager(entry_points=False), [("code_tests", 1.0, {})])
    assert err.value.field == "rewards[0].options" and "bwrap not found" in str(err.value), str(err.value)
    assert str(err.value).count("Fix:") == 1 and 'isolation = "weak"' in err.value.fix, str(err.value)


@pytest.mark.faults
def test_default_refuses_without_user_namespaces_naming_them(tmp_path, monkeypatch):
    """bwrap is installed but namespaces are refused (AppArmor's userns restriction, Docker)."""
    _fake_path(tmp_path, monkeypatch, bwrap="No permissions to creating new namespace", unshare=REFUSED)
    with pytest.raises(RewardError) as err:
        Sandbox(SandboxLimits(timeout_s=3))
    text = str(err.value)
    assert "bwrap does not work here (bwrap: No permissions to creating new namespace)" in text, text
    want = "let root create namespaces" if os.geteuid() == 0 else "enable unprivileged user namespaces"
    assert f"Fix: {want}" in text and 'isolation = "weak"' in text, text


@pytest.mark.faults
def test_a_bwrap_that_cannot_start_is_launched_once_per_process(tmp_path, monkeypatch):
    """Where bubblewrap cannot make its namespaces, each sandbox configuration (disk_mb, user, the
    python tool's and code_tests' own) tried every layout afresh: up to eight bwrap launches each
    before the refusal or the weak fallback. It is asked once per process, also from threads
    setting up at once, and every configuration gets the same reason."""
    _fake_path(tmp_path, monkeypatch, unshare=REFUSED)
    log = tmp_path / "launches"
    bwrap = tmp_path / "bin" / "bwrap"
    bwrap.write_text(f"#!/bin/sh\necho launch >> {log}\necho 'bwrap: No permissions to creating new namespace' >&2\n"
                     "exit 1\n")
    bwrap.chmod(0o755)
    errors: list[str] = []

    def build(disk_mb: int, user: str) -> None:
        try:
            Sandbox(SandboxLimits(timeout_s=3, disk_mb=disk_mb), isolation="auto", user=user)
        except RewardError as exc:
            errors.append(str(exc))

    configs = [(disk_mb, user) for disk_mb in (8, 16, 32) for user in ("auto", "none")]
    threads = [threading.Thread(target=build, args=config) for config in configs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(errors) == len(configs), errors
    assert all("bwrap does not work here (bwrap: No permissions to creating new namespace)" in e for e in errors)
    assert log.read_text().count("launch") == 1, log.read_text()


@pytest.mark.faults
def test_weak_is_the_explicit_opt_in_to_the_old_fallback(tmp_path, monkeypatch, capsys):
    python = _nobody_python()
    if python is None:
        pytest.skip("no interpreter user nobody can run (this root trainer's is under /root, no /usr/bin/python3)")
    _fake_path(tmp_path, monkeypatch)
    box = Sandbox(SandboxLimits(timeout_s=5), isolation="weak", python=python)
    assert box.level in ("unshare", "off") and "bwrap not found" in box.report["isolation"], box.report
    if os.geteuid() != 0:  # the report says what a non-root trainer's sample can reach
        assert "the trainer's own uid" in box.report["filesystem"], box.report
    captured = capsys.readouterr()
    assert "without full OS isolation" in captured.out + captured.err
    assert box.run(HALF, TESTS).passed == [True, False]


@pytest.mark.faults
def test_root_whose_unshare_is_refused_is_told_so_not_blamed_on_nobody(tmp_path, monkeypatch):
    """In Docker as root (no bwrap, unshare refused) the error said the interpreter could not run
    as 'nobody' (quoting unshare's refusal) and advised making it readable to nobody. unshare is
    the cause: it is now a reason of its own, and an interpreter nobody can run gets the off level."""
    if os.geteuid() != 0:
        pytest.skip("needs a root trainer (the sample is dropped to nobody only by root)")
    _fake_path(tmp_path, monkeypatch, unshare="unshare failed: " + REFUSED)
    python = _nobody_python()
    if python is not None:
        box = Sandbox(SandboxLimits(timeout_s=5), isolation="weak", python=python)
        # nobody, or a uid of its own per sample running at once (polyrl.sandbox.uids): never root
        unprivileged = ("on: samples run as nobody", "on: each sample running at once has its own uid")
        assert box.level == "off" and box.report["user"].startswith(unprivileged), box.report
        assert f"unshare does not work here (unshare: unshare failed: {REFUSED})" in box.report["isolation"]
    if _nobody_python_is(os.path.realpath(sys.executable)):
        return
    with pytest.raises(RewardError) as err:  # the trainer's own interpreter, which nobody cannot run
        Sandbox(SandboxLimits(timeout_s=5), isolation="weak")
    text = str(err.value)
    cause = text.split("cannot run as user 'nobody' (", 1)[1].split(") and ", 1)[0]
    assert "unshare" not in cause, text
    assert f"unshare does not work here (unshare: unshare failed: {REFUSED})" in text, text


def _nobody_python_is(python: str) -> bool:
    from polyrl.sandbox import isolation

    ask = [python, "-I", "-c", isolation._IDENTITY]
    expected = subprocess.run(ask, capture_output=True, text=True).stdout.strip()
    return isolation.probe(isolation.drop_privileges((65534, 65534)) + ask, expected) is None


@needs_bwrap
def test_without_libseccomp_auto_warns_and_require_refuses(monkeypatch, capsys):
    """Without libseccomp.so the bwrap level ran with no filter, said only in an info line, and
    "require" accepted it: a sample forked through ctypes and held max_processes x memory_mb."""
    monkeypatch.setattr(seccomp, "_cache", [(None, "off: no libseccomp bindings (ImportError: no libseccomp.so)")])
    monkeypatch.setattr(runner, "_launches", {})
    with pytest.raises(RewardError, match=r'"require" needs the seccomp filter.*Fix: install libseccomp'):
        Sandbox(SandboxLimits(timeout_s=5), isolation="require")
    box = Sandbox(SandboxLimits(timeout_s=5))
    assert box.level == "bwrap" and box.report["seccomp"].startswith("OFF (no libseccomp bindings"), box.report
    captured = capsys.readouterr()
    assert "without its seccomp filter" in captured.out + captured.err


SOCKETS = '''
import errno, socket
def families():
    out = {}
    for name, family in (("vsock", 40), ("alg", 38), ("packet", 17), ("netlink", 16)):
        try:
            socket.socket(family, socket.SOCK_STREAM if name not in ("packet", "netlink") else socket.SOCK_RAW).close()
            out[name] = 0
        except OSError as exc:
            out[name] = exc.errno
    for name, family in (("unix", 1), ("inet", 2), ("inet6", 10)):
        try:
            socket.socket(family, socket.SOCK_STREAM).close()
            out[name] = 0
        except OSError as exc:
            out[name] = exc.errno
    return out
'''


def _filter_only_box() -> Sandbox:
    """A sandbox whose seccomp filter alone refuses (no audit hook); skipped where no filter runs."""
    box = Sandbox(SandboxLimits(timeout_s=5), audit_hook=False)
    if not box.report["seccomp"].startswith("on"):
        pytest.skip("no seccomp filter here: " + box.report["seccomp"])
    return box


@needs_bwrap
def test_seccomp_refuses_socket_families_that_escape_the_network_namespace():
    """AF_VSOCK is not network-namespaced: from inside the "no network" sandbox a sample bound a
    port in the host's vsock space (on a VM, the hypervisor's services are there). Only unix,
    inet and inet6 sockets may be created; the rest fail as on a kernel without them."""
    box = _filter_only_box()
    cell = (f"got = families()\nassert got['vsock'] == got['alg'] == got['packet'] == got['netlink'] == {errno.EAFNOSUPPORT}, got\n"
            "assert got['unix'] == got['inet'] == got['inet6'] == 0, got\n")
    result = box.run(SOCKETS, parse_tests(cell))
    assert result.status == "ok" and result.passed == [True, True], result
    try:  # the trainer (no filter) can make one here: the refusal above is the filter's
        socket.socket(40, socket.SOCK_STREAM).close()
    except OSError:
        pytest.skip("no vsock on this machine: AF_VSOCK fails outside the sandbox too")


NETLINK = '''
import errno, socket
def netlink():
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()  # NETLINK_ROUTE
        return 0
    except OSError as exc:
        return exc.errno
def legitimate():
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("")  # an abstract name the kernel picks
    listener.listen(1)
    a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    a.connect(listener.getsockname())
    b = listener.accept()[0]
    a.sendall(b"ping")
    got = b.recv(4)
    a.close(), b.close(), listener.close()
    # AI_ADDRCONFIG: glibc asks NETLINK_ROUTE which address families are configured
    numeric = socket.getaddrinfo("127.0.0.1", 8080, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG)
    try:  # no /etc/hosts in the sandbox: a name may not resolve, with the filter or without it
        named = bool(socket.getaddrinfo("localhost", 8080, flags=socket.AI_ADDRCONFIG))
    except socket.gaierror:
        named = "gaierror"
    return got, [info[4][0] for info in numeric], named in (True, "gaierror")
'''


@needs_bwrap
def test_seccomp_refuses_netlink_and_address_lookups_still_answer():
    """AF_NETLINK was allowed: a sample could reach the kernel's netlink families (route, xfrm,
    netfilter, generic netlink and the modules behind it), a large attack surface it never needs
    behind a loopback-only namespace. Now it fails as on a kernel without it, and what asks for
    it degrades: getaddrinfo with AI_ADDRCONFIG (glibc's netlink query) still answers, a name
    lookup ends as it did (the sandbox has no /etc/hosts) and a unix connection works
    (``socketpair`` itself is refused: ``test_sandbox_async_solutions``). The audit
    hook is off so the filter alone is tested."""
    box = _filter_only_box()
    cell = (f"assert netlink() == {errno.EAFNOSUPPORT}, netlink()\n"
            "assert legitimate() == (b'ping', ['127.0.0.1'], True), legitimate()\n")
    result = box.run(NETLINK, parse_tests(cell))
    assert result.status == "ok" and result.passed == [True, True], result
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()  # the trainer (no filter) may: the refusal is the filter's


@needs_bwrap
@pytest.mark.parametrize("user", ["auto", "none"] if os.geteuid() == 0 else ["auto"])
def test_the_samples_capability_bounding_set_is_empty(user):
    """setpriv --bounding-set=-all silently kept the container's full set (it needs CAP_SETPCAP,
    which bwrap had dropped); user = "none" did not even ask."""
    box = Sandbox(SandboxLimits(timeout_s=5), user=user, audit_hook=False)
    probe = "CAPS = {l.split(':')[0]: int(l.split()[1], 16) for l in open('/proc/self/status') if l.startswith('Cap')}\n"
    result = box.run(probe, parse_tests("assert CAPS == {'CapInh': 0, 'CapPrm': 0, 'CapEff': 0, 'CapBnd': 0, "
                                        "'CapAmb': 0}, CAPS\n"))
    assert result.status == "ok" and result.passed == [True], result


@pytest.mark.faults
def test_trainer_environment_never_reaches_the_sample(tmp_path, monkeypatch):
    """At every level the sample starts with a fixed environment (no keys, tokens, PYTHON*), and
    no process it may read the environment of (bubblewrap's PID 1 for a root sample) holds one."""
    for key in ("OPENAI_API_KEY", "HF_TOKEN", "WANDB_API_KEY"):
        monkeypatch.setenv(key, f"{key}-TRAINER-SECRET")
    probe = ("import glob, os\nSECRETS = [k for k, v in os.environ.items() if 'SECRET' in v or k.endswith(('_KEY', "
             "'_TOKEN'))]\nfor path in glob.glob('/proc/[0-9]*/environ'):\n    try:\n"
             "        if b'SECRET' in open(path, 'rb').read():\n            SECRETS.append(path)\n"
             "    except OSError:\n        pass\n")
    tests = parse_tests("assert SECRETS == []\n")
    boxes = []
    if shutil.which("bwrap"):
        try:
            boxes.append(Sandbox(SandboxLimits(timeout_s=5)))
        except RewardError:
            pass
    boxes.append(Sandbox(SandboxLimits(timeout_s=5), isolation="off", user="none"))
    for box in boxes:
        result = box.run(probe, tests)
        assert result.passed == [True], (box.level, result)


# --- the agents' python tool -------------------------------------------------------------------------


def _tool_config(**environment):
    from polyrl.config import RunConfig

    return RunConfig.from_dict({"model": {"path": "m"}, "data": {"task": "arithmetic"},
                                "rewards": [{"name": "numeric_match"}],
                                "environment": {"tools": ["python"], **environment}})


@pytest.mark.faults
def test_python_tool_is_refused_at_setup_where_it_cannot_isolate(tmp_path, monkeypatch):
    """The tool built its own default sandbox at the first call, mid-rollout, with no option: where
    "auto" fell back the model printed ~/.netrc and got it back as the tool's answer."""
    from polyrl.agents import builtin
    from polyrl.agents.setup import check_environment
    from polyrl.registry import get_registry

    monkeypatch.setattr(builtin, "_sandbox", None)
    monkeypatch.setattr(builtin, "_isolation", "auto")
    _fake_path(tmp_path, monkeypatch)
    with pytest.raises(ConfigError) as err:
        check_environment(_tool_config(), get_registry())
    text = str(err.value)
    assert err.value.field == "environment.python_isolation", text
    assert "bwrap not found" in text and "Fix: install bubblewrap" in text and 'python_isolation = "weak"' in text
    if os.geteuid() != 0 or _nobody_python_is(sys.executable):
        check_environment(_tool_config(python_isolation="weak"), get_registry())  # the opt-in
        assert builtin._python_sandbox().level in ("unshare", "off")
    with pytest.raises(ConfigError, match="python_isolation: unknown isolation 'strict'"):
        check_environment(_tool_config(python_isolation="strict"), get_registry())
    with pytest.raises(ConfigError, match="the python tool is not in environment.tools"):
        check_environment(_tool_config(tools=["calculator"], python_isolation="weak"), get_registry())


@pytest.mark.faults
def test_python_tool_is_listed_unusable_where_setup_refuses_it(tmp_path, monkeypatch, capsys):
    """`polyrl environments` listed the python tool as usable on a machine without bubblewrap,
    where every run naming it is refused at setup. The listing asks the same check and says why,
    in the setup error's words (what is missing, the fix, the "weak" opt-in)."""
    from polyrl import cli
    from polyrl.agents import builtin
    from polyrl.agents.setup import check_environment
    from polyrl.registry import Registry, get_registry

    monkeypatch.setattr(builtin, "_sandbox", None)
    monkeypatch.setattr(builtin, "_isolation", "auto")
    _fake_path(tmp_path, monkeypatch)
    status = {(s.kind, s.name): s for s in Registry().environment_statuses()}[("tool", "python")]
    assert not status.available, status
    with pytest.raises(ConfigError) as err:
        check_environment(_tool_config(), get_registry())
    assert err.value.message in status.reason and f"Fix: {err.value.fix}" in status.reason, (status, err.value)
    assert "bwrap not found" in status.reason and "Fix: install bubblewrap" in status.reason
    assert 'python_isolation = "weak"' in status.reason
    assert cli.main(["environments", "--json"]) == 0
    listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tools"]}["python"]
    assert (listed["available"], listed["reason"]) == (False, status.reason)
    if os.geteuid() != 0 or _nobody_python_is(sys.executable):  # a run opting in: its tool is usable
        check_environment(_tool_config(python_isolation="weak"), get_registry())
        assert {(s.kind, s.name): s for s in Registry().environment_statuses()}[("tool", "python")].available
