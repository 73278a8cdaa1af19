"""The ``unshare`` level (``isolation = "weak"`` without bubblewrap): what its read-only view of the
host stops (``polyrl.sandbox.host_view``). Escapes replayed with the audit hook OFF, so only the
kernel stops them; bubblewrap is taken off PATH so the level is ``unshare`` on any machine that
has util-linux and lets it make namespaces."""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import threading

import pytest
from sandbox_attacks import ROOT_ONLY_PROC, ROOT_THREADS, SOCKET_BUFFERS, SYSV_ATTACK, run_lingering

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, isolation, runner

pytestmark = pytest.mark.faults

TESTS = parse_tests("assert add(1, 2) == 3\n")
GOOD = "def add(a, b):\n    return a + b\n"
LIMITS = SandboxLimits(timeout_s=20, memory_mb=512, disk_mb=8)


def _unshare_works() -> str | None:
    """None when util-linux unshare makes a mount, PID and network namespace here, else why not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "util-linux unshare not installed"
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    done = subprocess.run([unshare, *user, "--mount", "--net", "--pid", "--fork", "true"], capture_output=True,
                          timeout=60)
    return None if done.returncode == 0 else done.stderr.decode(errors="replace").strip() or "refused"


WHY_NOT = _unshare_works()
needs_unshare = pytest.mark.skipif(WHY_NOT is not None, reason=f"unshare cannot make namespaces here: {WHY_NOT}")


def _python_for(user: str) -> str | None:
    """An interpreter the sample's user can run (a root trainer's own under /root is not nobody's)."""
    if user == "none" or os.geteuid() != 0:
        return sys.executable
    for python in (os.path.realpath(sys.executable), "/usr/bin/python3"):
        ask = [python, "-I", "-c", isolation._IDENTITY]
        expected = subprocess.run(ask, capture_output=True, text=True, timeout=60).stdout.strip()
        if os.path.exists(python) and isolation.probe(isolation.drop_privileges((65534, 65534)) + ask,
                                                      expected) is None:
            return python
    return None


@pytest.fixture(scope="module")
def _weak_bin(tmp_path_factory) -> tuple[str, dict]:
    """The module's folder of util-linux tools without bwrap, and the probes' cache its tests share:
    a probe's answer is keyed by its whole command (this folder's tools in it, and the setup program
    and pivot_root number a test patches), so sharing it across tests changes no answer and saves
    each test re-running the same probe commands (about 0.6 s a test)."""
    bin_dir = tmp_path_factory.mktemp("weak-bin")
    for tool in ("unshare", "setpriv", "choom", "mount"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir), {}


@pytest.fixture
def no_bwrap(monkeypatch, _weak_bin):
    """A PATH without bwrap, with the util-linux tools the weak levels use; the launches chosen
    before are forgotten (they depend on what a test patches in this process)."""
    bin_dir, probes = _weak_bin
    monkeypatch.setenv("PATH", bin_dir)
    monkeypatch.setattr(runner, "_launches", {})
    monkeypatch.setattr(isolation, "_probes", probes)


@pytest.fixture
def no_filter(monkeypatch):
    """As without libseccomp: the level runs without the seccomp filter (what the kernel alone stops)."""
    from polyrl.sandbox import seccomp

    monkeypatch.setattr(seccomp, "compiled_filter", lambda: (None, "off: no libseccomp bindings (test)"))


def _weak_box(user: str) -> Sandbox:
    python = _python_for(user)
    if python is None:
        pytest.skip("no interpreter user nobody can run (this trainer's is under /root and no /usr/bin/python3)")
    box = Sandbox(LIMITS, isolation="weak", user=user, python=python, audit_hook=False)
    assert box.level == "unshare", box.report
    return box


def _socket_server(path: str) -> tuple[socket.socket, list[bytes]]:
    """A 0666 unix socket at ``path`` (a judge's, a reward server's) recording what reaches it."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o666)
    server.listen(4)
    server.settimeout(0.2)
    got: list[bytes] = []

    def serve() -> None:
        while server.fileno() >= 0:
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    got.append(conn.recv(100))
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return server, got


#: a sample's attempt to send a forged score to each of ``sockets`` (unix sockets of the host)
SOCKET_ATTACK = """
for path in {sockets!r}:
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(b"FORGED 1.0")
        print("CONNECTED", path)
    except OSError as exc:
        print("REFUSED", path, exc.strerror)
"""
ATTACK = """
import os, socket
""" + SOCKET_ATTACK + """for path in {files!r}:
    try:
        with open(path, "w") as out:
            out.write("sample was here")
        print("WROTE", path)
    except OSError as exc:
        print("DENIED", path, exc.strerror)
"""


def _no_new_root(monkeypatch) -> None:
    """As where ``pivot_root`` is refused (a root on the initramfs): the level's fallback view."""
    from polyrl.sandbox import new_root

    monkeypatch.setattr(new_root, "pivot_root_number", lambda: None)


@needs_unshare
@pytest.mark.parametrize("user,per_mount,fallback",
                         [("auto", False, False), ("none", False, False), ("none", True, False),
                          ("auto", False, True), ("none", False, True), ("none", True, True)]
                         if os.geteuid() == 0 else [("auto", False, False), ("auto", True, False),
                                                    ("auto", False, True), ("auto", True, True)])
def test_unshare_level_hides_socket_folders_and_keeps_the_host_read_only(no_bwrap, user, per_mount, fallback,
                                                                         monkeypatch):
    """At the unshare level the host's files were all there with the sample's permissions: it
    connected to a 0666 unix socket in /run (a judge's: it sent a forged score), wrote a
    world-writable folder, and as uid 0 (user = "none") rewrote a root-owned 0644 file outside its
    folder. Now the sample has a root of its own (``new_root``), or where that is refused
    (``fallback``) /run, /var/tmp (and the other usual places) are empty read-only folders and the
    rest of the host is read-only; a right solution still scores. ``per_mount``: a kernel without
    ``mount_setattr`` (before 5.12), where each mount is made read-only in turn."""
    from polyrl.sandbox import host_view, new_root

    if per_mount:
        for module in (host_view, new_root):
            assert "ctypes.c_long(442)" in module.SETUP
            monkeypatch.setattr(module, "SETUP", module.SETUP.replace("ctypes.c_long(442)", "ctypes.c_long(-1)"))
    if fallback:
        _no_new_root(monkeypatch)
    if os.geteuid() != 0:
        pytest.skip("needs root to place a socket in /run and a folder in /var")
    tag = f"polyrl-escape-{os.getpid()}-{user}-{per_mount}"
    run_dir, var_dir, var_tmp = f"/run/{tag}", f"/var/{tag}", f"/var/tmp/{tag}"
    for folder, mode in ((run_dir, 0o755), (var_dir, 0o777), (var_tmp, 0o777)):
        os.mkdir(folder)
        os.chmod(folder, mode)
    server = None
    try:
        server, got = _socket_server(f"{run_dir}/judge.sock")
        with open(f"{var_dir}/scores.json", "w") as out:
            out.write("intact")
        os.chmod(f"{var_dir}/scores.json", 0o644)
        box = _weak_box(user)
        attack = ATTACK.format(sockets=[f"{run_dir}/judge.sock"],
                               files=[f"{var_dir}/scores.json", f"{var_dir}/new.txt", f"{var_tmp}/left.txt"])
        result = box.run(attack + GOOD, TESTS)
        assert result.status == "ok" and result.passed == [True], (result, result.output)
        assert "CONNECTED" not in result.output and not any(got), (result.output, got)
        assert "WROTE" not in result.output, result.output
        assert open(f"{var_dir}/scores.json").read() == "intact"
        assert not os.path.exists(f"{var_dir}/new.txt") and not os.listdir(var_tmp)
        if fallback:
            assert "host files read-only" in box.report["filesystem"] and "/run" in box.report["filesystem"]
            assert "no root of its own: polyrl-sandbox new root: [Errno 38] pivot_root" in box.report["filesystem"]
        else:
            assert box.report["filesystem"].startswith("a root of its own"), box.report
    finally:
        if server is not None:
            server.close()
        for folder in (run_dir, var_dir, var_tmp):
            shutil.rmtree(folder, ignore_errors=True)


@needs_unshare
def test_unshare_level_sample_cannot_write_the_trainers_terminal(no_bwrap):
    """The host's /dev/pts was the sample's: as uid 0 without capabilities (user = "none") it
    opened the trainer's terminal (root's, mode 0620) and wrote to it (escape sequences, fake
    prompts). Now /dev/pts is an empty read-only folder: no pty opens, /dev/ptmx included
    (ENODEV); TIOCSTI needs the terminal open first. A non-root trainer's sample owns its
    terminal, so that case is the same without the root."""
    master, slave = os.openpty()
    name = os.ttyname(slave)
    try:
        box = _weak_box("none" if os.geteuid() == 0 else "auto")
        attack = (f"import os\ntry:\n    fd = os.open({name!r}, os.O_WRONLY | os.O_NOCTTY)\n"
                  "    os.write(fd, b'PWNED')\n    print('WROTE terminal')\nexcept OSError as exc:\n"
                  "    print('DENIED', exc.strerror)\n"
                  "try:\n    os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY)\n    print('PTMX opened')\n"
                  "except OSError as exc:\n    print('PTMX', exc.strerror)\n")
        result = box.run(attack + GOOD, TESTS)
        assert result.status == "ok" and result.passed == [True], (result, result.output)
        ready, _, _ = select.select([master], [], [], 0.5)
        written = os.read(master, 100) if ready else b""
        assert b"PWNED" not in written and "WROTE" not in result.output, (result.output, written)
        assert "PTMX opened" not in result.output, result.output
    finally:
        os.close(master)
        os.close(slave)


@needs_unshare
def test_unshare_level_without_the_view_falls_back_and_says_why(no_bwrap, monkeypatch):
    """Where the kernel refuses the mounts (a container without CAP_SYS_ADMIN), the level runs as
    before, host files visible, and ``isolation_report()`` says the view is off and why."""
    from polyrl.sandbox import host_view, new_root

    for module, name in ((host_view, "host view"), (new_root, "new root")):
        monkeypatch.setattr(module, "SETUP", f"import sys\nprint('polyrl-sandbox {name}: mount tmpfs on /tmp: "
                                             "Operation not permitted', file=sys.stderr)\nsys.exit(126)\n")
    box = _weak_box("auto")
    assert not box.launch.private_tmp
    assert box.report["filesystem"].startswith("host files visible"), box.report
    assert "no read-only view: polyrl-sandbox new root: mount tmpfs on /tmp: Operation not permitted; " \
        "polyrl-sandbox host view: mount tmpfs on /tmp: Operation not permitted" in box.report["filesystem"], box.report
    result = box.run(GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], result


def test_hidden_folders_never_hide_the_system(monkeypatch, tmp_path):
    """The trainer's home and working folder are hidden, but never ``/`` or a folder holding or
    inside the system (a trainer started in ``/`` or ``/usr/lib`` must not hide the C library),
    nor anything under ``/tmp`` (the sample's own tmpfs) or inside another hidden folder."""
    from polyrl.sandbox import host_view

    project = tmp_path / "project"
    project.mkdir()
    hidden = host_view.hidden_folders(["/", "/usr/lib", "/etc", "/var", str(project), "/root/.cache"])
    assert not {"/", "/usr/lib", "/etc", "/var"} & set(hidden), hidden
    assert str(project) not in hidden and not any(h.startswith("/root/") for h in hidden), hidden
    assert not any(a != b and b.startswith(a + "/") for a in hidden for b in hidden), hidden
    outside = "/srv" if os.path.isdir("/srv") else None
    if outside:
        assert outside in hidden


def test_usr_hidden_never_hides_what_the_interpreter_loads():
    """A trainer's folder inside a system folder of /usr is hidden (a project in /usr/local/lib),
    but never the interpreter's standard library or a folder in it, its site folders, a folder
    the dynamic linker loads libraries from, or one holding a system folder."""
    from polyrl.sandbox import host_view

    python = "/usr/bin/python3"
    if not os.path.exists(python):
        pytest.skip("needs the system's /usr/bin/python3")
    base, own, libraries = host_view._needed(python)
    keep = [*own, *[p for p in libraries if p.startswith("/usr/")], "/usr/local", "/usr/lib"]
    keep += [os.path.join(own[0], "encodings")] if own else []
    assert own and base == "/usr", (base, own)
    assert host_view.usr_hidden(python, [p for p in keep if os.path.isdir(p)]) == []


NOBODY_ATTACK = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
print("CAPS", [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0])
try:
    open({file!r}, "w").write("sample was here")
    print("WROTE")
except OSError as exc:
    print("DENIED", exc.strerror)
try:
    socket.socket(socket.AF_UNIX).connect({sock!r})
    print("CONNECTED")
except OSError as exc:
    print("REFUSED", exc.strerror)
print("UMOUNT", libc.umount2(b"/tmp", 2), ctypes.get_errno())
print("REMOUNT", libc.mount(None, b"/", None, 32 | 4096, None), ctypes.get_errno())
print("NESTED", libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno())  # CLONE_NEWUSER | CLONE_NEWNS
print("UMOUNT", libc.umount2(b"/tmp", 2), ctypes.get_errno())
print("SHMGET", libc.shmget(0, 4096, 0o1600), ctypes.get_errno(), open("/proc/sys/kernel/shmmni").read().strip())
"""


@needs_unshare
@pytest.mark.parametrize("layout", ["new_root", "host_view"])
def test_unprivileged_trainer_view_holds_against_its_own_sample(tmp_path, layout):
    """A non-root trainer's sample is root of its own user namespace: with its capabilities there
    it could unmount what hides /run or remount / writable. The setup hands it none (setpriv), and
    in a user namespace it makes itself the mounts it inherits are locked. The unshare command a
    non-root trainer builds is run here as user nobody, against nobody's own file and a 0666
    socket in /run: it writes neither, and every unmount and remount is refused. ``layout``: a
    root of its own (``new_root``) and the fallback read-only view of the host (``host_view``)."""
    from polyrl.sandbox import host_view, new_root

    python = "/usr/bin/python3"
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None or not os.path.exists(python) or _python_for("auto") is None:
        pytest.skip("needs root (to become nobody), setpriv and a /usr/bin/python3 nobody can run")
    tag = f"polyrl-escape-{os.getpid()}-nobody"
    run_dir, var_dir = f"/run/{tag}", f"/var/{tag}"
    for folder in (run_dir, var_dir):
        os.mkdir(folder)
        os.chown(folder, 65534, 65534)
    server = None
    try:
        server, got = _socket_server(f"{run_dir}/judge.sock")
        target = f"{var_dir}/mine.txt"
        with open(target, "w") as out:
            out.write("intact")
        os.chown(target, 65534, 65534)
        unshare = shutil.which("unshare") or "unshare"
        keep = isolation.interpreter_binds(isolation.interpreter_paths(python), python)
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
               unshare, "--user", "--map-root-user", "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc",
               *(new_root.setup_command(python, 8, 4096, keep) if layout == "new_root" else
                 host_view.setup_command(python, 8, 4096, keep, host_view.hidden_folders(["/nonexistent"]), root=False)),
               *host_view.namespace_drop(), python, "-I", "-S", "-c",
               NOBODY_ATTACK.format(file=target, sock=f"{run_dir}/judge.sock")]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/")
        out = done.stdout
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "CAPS 0000000000000000" in out and "WROTE" not in out and "CONNECTED" not in out, out
        assert open(target).read() == "intact" and not any(got), (out, got)
        umounts = [line for line in out.splitlines() if line.startswith(("UMOUNT", "REMOUNT"))]
        assert len(umounts) == 3 and all(line.split()[1] == "-1" for line in umounts), out
        shm = next(line.split() for line in out.splitlines() if line.startswith("SHMGET"))
        assert shm[1:] == ["-1", "28", "0"] or shm[3] != "0", out  # ENOSPC where its user namespace may set shmmni
        if layout == "new_root":  # chrooted below its namespace's root: the kernel refuses a user namespace
            assert "NESTED -1 1" in out, out
        else:  # the setup set its namespace's user.max_user_namespaces to 0: it made one before
            assert "NESTED -1 28" in out, out
    finally:
        if server is not None:
            server.close()
        for folder in (run_dir, var_dir):
            shutil.rmtree(folder, ignore_errors=True)


READ_ATTACK = """
import os, socket
for path in {files!r}:
    try:
        print("READ", path, open(path).read())
    except OSError as exc:
        print("DENIED", path, exc.strerror)
""" + SOCKET_ATTACK + """print("ROOT", sorted(os.listdir("/")))
"""


@needs_unshare
@pytest.mark.parametrize("user", ["auto", "none"] if os.geteuid() == 0 else ["auto"])
def test_unshare_level_shows_no_host_file_or_socket_outside_the_system(no_bwrap, user):
    """The read-only view hid only the usual folders (/run, /home, the working folder, ...): a
    sample still read a world-readable dataset with its expected answers anywhere else (/opt,
    /var/lib, a data disk) and sent a forged score to a 0666 unix socket there (a read-only mount
    does not stop ``connect``). Now the sample's root is a new one, as under bubblewrap: /usr, the
    interpreter's folders, its own /proc, a minimal /dev and its /tmp; nothing else of the host."""
    if os.geteuid() != 0:
        pytest.skip("needs root to place a file in /opt and a socket in /var/lib")
    tag = f"polyrl-escape-{os.getpid()}-{user}-root"
    opt_dir, lib_dir = f"/opt/{tag}", f"/var/lib/{tag}"
    for folder in (opt_dir, lib_dir):
        os.makedirs(folder)
        os.chmod(folder, 0o755)
    server = None
    try:
        with open(f"{opt_dir}/answers.jsonl", "w") as out:
            out.write('{"expected": 42}')
        os.chmod(f"{opt_dir}/answers.jsonl", 0o644)
        server, got = _socket_server(f"{lib_dir}/judge.sock")
        box = _weak_box(user)
        attack = READ_ATTACK.format(files=[f"{opt_dir}/answers.jsonl", "/etc/hostname"],
                                    sockets=[f"{lib_dir}/judge.sock"])
        result = box.run(attack + GOOD, TESTS)
        assert result.status == "ok" and result.passed == [True], (result, result.output)
        assert '"expected": 42' not in result.output and f"READ {opt_dir}" not in result.output, result.output
        assert "CONNECTED" not in result.output and not any(got), (result.output, got)
        shown = eval(result.output.split("ROOT ", 1)[1].splitlines()[0])  # noqa: S307 - a list the sample printed
        assert not {"opt", "var", "etc", "home", "run", "srv", "mnt"} & set(shown), shown
        assert box.report["filesystem"].startswith("a root of its own"), box.report
    finally:
        if server is not None:
            server.close()
        for folder in (opt_dir, lib_dir):
            shutil.rmtree(folder, ignore_errors=True)


NESTED_ATTACK = """
import ctypes, fcntl, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
done = libc.unshare(0x10000000 | 0x00020000 | 0x40000000)  # CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET
print("NESTED", done, ctypes.get_errno())
if done == 0:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:  # SIOCSIFFLAGS: CAP_NET_ADMIN over a network namespace of its own (nf_tables' attack surface)
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", 1))
        print("NET_ADMIN lo up")
    except OSError as exc:
        print("NET_ADMIN", exc.strerror)
    os.makedirs("/tmp/sys", exist_ok=True)
    if libc.mount(b"sysfs", b"/tmp/sys", b"sysfs", 1 | 2 | 4 | 8, None) == 0:
        print("SYSFS", sorted(os.listdir("/tmp/sys/devices/system/cpu")))
"""


@needs_unshare
@pytest.mark.parametrize("user", ["auto", "none"] if os.geteuid() == 0 else ["auto"])
def test_unshare_level_sample_makes_no_user_namespace_of_its_own(no_bwrap, no_filter, user):
    """Without the seccomp filter a sample made a user namespace of its own (with a network and
    mount namespace): there it held CAP_NET_ADMIN and CAP_SYS_ADMIN (nf_tables, the usual kernel
    exploit's first step) and, where a sysfs was in view, mounted its own (the host's devices and
    CPUs). Now it runs chrooted below its mount namespace's root (``new_root``), where the kernel
    refuses it any user namespace (EPERM), also without the filter (no libseccomp), which
    refuses ``unshare`` itself."""
    box = _weak_box(user)
    assert box.launch.seccomp_program is None, box.report
    result = box.run(NESTED_ATTACK + GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], (result, result.output)
    # EPERM, or ENOSPC first where a root trainer's sample is in a user namespace of its own (``userns_wrapper``)
    assert "NESTED -1 1" in result.output or "NESTED -1 28" in result.output, result.output
    assert "NET_ADMIN" not in result.output and "SYSFS" not in result.output, result.output
    assert "no user namespace of its own" in box.report["filesystem"], box.report


@needs_unshare
@pytest.mark.parametrize("level", ["view", "off"])
@pytest.mark.parametrize("user", ["auto", "none"] if os.geteuid() == 0 else ["auto"])
def test_host_view_and_off_samples_nest_no_user_namespace(no_bwrap, no_filter, user, level, monkeypatch):
    """Where the sample is not chrooted (the ``unshare`` level's host view, where ``pivot_root`` is
    refused, and the ``off`` level) it made a user namespace of its own without the filter, with
    a network and mount namespace, and held CAP_NET_ADMIN there (a root trainer's sample was in
    the host's user namespace, whose limit is the host's). Now it starts in a user namespace of its
    own whose ``user.max_user_namespaces`` is 0 (a non-root trainer's host view: the setup sets
    its namespace's own): ENOSPC."""
    if level == "view":
        _no_new_root(monkeypatch)
        box = _weak_box(user)
        assert "host files read-only" in box.report["filesystem"], box.report
    else:
        python = _python_for(user)
        if python is None:
            pytest.skip("no interpreter user nobody can run")
        box = Sandbox(LIMITS, isolation="off", user=user, python=python, audit_hook=False)
    result = box.run(NESTED_ATTACK + GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], (result, result.output)
    # at off the server's small filter refuses unshare itself (EPERM) before the namespace's limit (ENOSPC)
    assert "NESTED -1 28" in result.output or level == "off" and "NESTED -1 1" in result.output, result.output
    assert "NET_ADMIN" not in result.output, result.output


@needs_unshare
@pytest.mark.parametrize("fallback", [False, True])
def test_unshare_level_sample_holds_no_sysv_memory_past_memory_mb(no_bwrap, no_filter, fallback, monkeypatch):
    """Without the seccomp filter (which refuses ``shmget``/``msgget``) a sample held 384 MB of
    SysV shared memory with ``memory_mb = 128``: a detached segment outlives its mapping in the
    sample's IPC namespace, where ``shmall`` is unlimited, and RLIMIT_AS counts only what is
    mapped. Now the setup sets ``shmmni`` and ``msgmni`` of that namespace to 0: no segment, no
    queue (ENOSPC), also without the filter (no libseccomp), which refuses both calls.
    ``fallback``: the read-only host view."""
    if fallback:
        _no_new_root(monkeypatch)
    python = _python_for("auto")
    if python is None:
        pytest.skip("no interpreter user nobody can run")
    box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=128, disk_mb=8), isolation="weak", python=python,
                  audit_hook=False)
    assert box.level == "unshare" and box.launch.private_tmp, box.report
    result = box.run(SYSV_ATTACK + GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], (result, result.output)
    assert "SHM_HELD_MB 0" in result.output and "SHMGET No space left on device" in result.output, result.output
    assert "MSGGET -1 No space left on device" in result.output, result.output


FILTER_ATTACK = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
for name, family, kind in (("VSOCK", 40, socket.SOCK_STREAM), ("NETLINK", 16, socket.SOCK_RAW)):
    try:
        socket.socket(family, kind)
        print(name, "opened")
    except OSError as exc:
        print(name, exc.strerror)
for name, call in (("MEMFD", lambda: os.memfd_create("held")), ("FORK", os.fork)):
    try:
        if call() == 0:
            os._exit(0)
        print(name, "made")
    except OSError as exc:
        print(name, exc.strerror)
print("KEYCTL", libc.syscall(250 if os.uname().machine == "x86_64" else 219, 0, -3, 0), ctypes.get_errno())
"""


@needs_unshare
@pytest.mark.parametrize("fallback", [False, True])
def test_unshare_level_loads_the_seccomp_filter(no_bwrap, fallback, monkeypatch):
    """The ``unshare`` level ran without the seccomp filter ("off: needs bwrap"): a sample opened
    AF_VSOCK (not separated by a network namespace: the hypervisor's services on a VM) and
    AF_NETLINK sockets, made a memfd (memory no rlimit counts), forked (each process
    ``memory_mb``) and called keyctl. Now the setup program loads the filter bubblewrap gets,
    last before the privilege drop: each of them is refused, and the report says the filter is on.
    ``fallback``: the read-only host view."""
    pytest.importorskip("pyseccomp")
    if fallback:
        _no_new_root(monkeypatch)
    box = _weak_box("auto")
    result = box.run(FILTER_ATTACK + GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], (result, result.output)
    for line in ("VSOCK Address family not supported by protocol", "NETLINK Address family not supported by protocol",
                 "MEMFD Operation not permitted", "FORK Operation not permitted", "KEYCTL -1 1"):
        assert line in result.output, result.output
    assert box.launch.seccomp_program is not None and box.report["seccomp"].startswith("on:"), box.report



@needs_unshare
@pytest.mark.skipif(os.geteuid() != 0, reason="a sample keeps uid 0 only when the trainer is root")
@pytest.mark.parametrize("fallback", [False, True])
def test_unshare_level_root_samples_threads_are_capped_by_max_processes(no_bwrap, fallback, monkeypatch):
    """As under bubblewrap (``test_sandbox_redteam``): a root sample (``user = "none"``) has real uid 0,
    which RLIMIT_NPROC never binds, and started 200 threads at ``max_processes = 16``. With the
    filter its real uid is one of the pool's (euid 0 still), and it cannot set it back to 0.
    ``fallback``: the read-only host view."""
    pyseccomp = pytest.importorskip("pyseccomp")
    import errno

    if fallback:
        _no_new_root(monkeypatch)
    box = _weak_box("none")
    numbers = {name: pyseccomp.resolve_syscall(pyseccomp.system_arch(), name)
               for name in ("setuid", "setreuid", "setresuid")}
    refused = {name: (-1, errno.EPERM) for name in numbers}
    tests = f"assert back_to_root({numbers!r}) == {refused!r}\nassert 0 < threads(200) <= 16\n"
    result = box.run(ROOT_THREADS, parse_tests(tests))
    assert result.status == "ok" and result.passed == [True, True], (result, box.report)
    assert box.launch.uid_pool and "not enforced" not in box.report["rlimits"], box.report


@needs_unshare
def test_unshare_level_sample_cannot_enlarge_its_socket_buffers(no_bwrap):
    """The setup program's filter is bubblewrap's, so ``SO_SNDBUF`` is answered without effect
    here too: a sample asking for 64 MB send buffers held 228 MB of kernel memory in unix socket
    pairs (``test_sandbox_redteam.py``), 6 MB with the default ones."""
    pytest.importorskip("pyseccomp")
    box = _weak_box("auto")
    tests = parse_tests("assert held_kb(False) > 0\nassert held_kb(True) <= held_kb(False) * 1.25 + 64\n")
    result = box.run(SOCKET_BUFFERS, tests)
    assert result.status == "ok" and result.passed == [True, True], (result, result.output)

OLD_KERNEL = """
import errno, json, os, sys
import pyseccomp as sc

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, new_root

layout, attack = sys.argv[1], sys.argv[2]
rules = sc.SyscallFilter(sc.ALLOW)
rules.add_rule(sc.ERRNO(errno.ENOSYS), 442)  # mount_setattr: as on a kernel before 5.12
if layout == "fallback":
    rules.add_rule(sc.ERRNO(errno.EINVAL), new_root.pivot_root_number())  # as on a root that is the initramfs
rules.load()
box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=512, disk_mb=8), isolation="weak", user="none",
              audit_hook=False)
result = box.run(attack + "def add(a, b):\\n    return a + b\\n", parse_tests("assert add(1, 2) == 3\\n"))
print(json.dumps({"level": box.level, "filesystem": box.report["filesystem"], "status": result.status,
                  "passed": result.passed, "output": result.output}))
"""


@needs_unshare
@pytest.mark.parametrize("layout", ["new_root", "fallback"])
def test_unshare_level_on_a_kernel_without_mount_setattr_keeps_the_host_read_only(no_bwrap, layout, tmp_path):
    """Each mount made read-only in turn (the kernel has no ``mount_setattr``, before Linux 5.12)
    was tested only by editing the setup program. Here the kernel itself answers ENOSYS (a
    seccomp filter on the trainer, inherited by unshare and the setup), and ``fallback``: it also
    refuses ``pivot_root`` (EINVAL, as on an initramfs root). A uid-0 sample without capabilities
    (``user = "none"``) owns root's files: it still writes none in /usr, nor (fallback) in /var."""
    pytest.importorskip("pyseccomp")
    if os.geteuid() != 0:
        pytest.skip("needs root: user = \"none\" owns root's files, which only a read-only mount keeps")
    tag = f"polyrl-escape-{os.getpid()}-{layout}"
    var_dir = f"/var/{tag}"
    os.mkdir(var_dir)
    try:
        with open(f"{var_dir}/scores.json", "w") as out:
            out.write("intact")
        os.chmod(f"{var_dir}/scores.json", 0o644)
        attack = ATTACK.format(sockets=[], files=[f"/usr/local/{tag}", f"{var_dir}/scores.json"])
        script = tmp_path / "old_kernel.py"
        script.write_text(OLD_KERNEL)
        done = subprocess.run([sys.executable, str(script), layout, attack], capture_output=True, text=True,
                              timeout=120, env={**os.environ})
        assert done.returncode == 0, done.stderr[-2000:]
        import json

        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert got["level"] == "unshare" and got["status"] == "ok" and got["passed"] == [True], got
        assert "WROTE" not in got["output"], got["output"]
        assert not os.path.exists(f"/usr/local/{tag}") and open(f"{var_dir}/scores.json").read() == "intact"
        if layout == "fallback":
            assert "no root of its own: polyrl-sandbox new root: [Errno 22] pivot_root" in got["filesystem"], got
            assert "DENIED /usr/local" in got["output"] and f"DENIED {var_dir}" in got["output"], got["output"]
        else:
            assert got["filesystem"].startswith("a root of its own"), got
            assert "Read-only file system" in got["output"].split(f"DENIED /usr/local/{tag}", 1)[1].splitlines()[0]
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
        if os.path.exists(f"/usr/local/{tag}"):
            os.remove(f"/usr/local/{tag}")


AS_TRAINER = """
import json, sys
from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits

box = Sandbox(SandboxLimits(timeout_s=20, memory_mb=512, disk_mb=8), isolation="weak", audit_hook=False,
              python=sys.executable)
result = box.run(sys.argv[1] + "def add(a, b):\\n    return a + b\\n", parse_tests("assert add(1, 2) == 3\\n"))
print(json.dumps({"level": box.level, "filesystem": box.report["filesystem"], "status": result.status,
                  "passed": result.passed, "output": result.output}))
"""


@needs_unshare
def test_unprivileged_trainer_sample_has_a_root_of_its_own():
    """The whole ``unshare`` level as a non-root trainer builds it (user ``nobody`` running the
    sandbox, with the system's Python of this version and this environment's packages): its
    sample sees no host file outside /usr and the interpreter's folders (a world-readable dataset
    in /var/lib was the sample's to read before), and the report says so."""
    import json

    python = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None or not os.path.exists(python):
        pytest.skip(f"needs root (to become nobody), setpriv and {python}")
    import attrs

    packages = os.path.dirname(os.path.dirname(attrs.__file__))
    core = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(isolation.__file__))))
    tag = f"/var/lib/polyrl-escape-{os.getpid()}-trainer"
    os.mkdir(tag)
    os.chmod(tag, 0o755)  # the trainer's (nobody's) folder: pytest's own is root's, mode 0700
    try:
        tools = f"{tag}/bin"
        os.mkdir(tools)
        for tool in ("unshare", "setpriv", "choom", "mount"):
            if shutil.which(tool):
                os.symlink(shutil.which(tool), f"{tools}/{tool}")
        script = f"{tag}/trainer.py"
        with open(script, "w") as out:
            out.write(AS_TRAINER)
        with open(f"{tag}/answers.jsonl", "w") as out:
            out.write('{"expected": 42}')
        attack = READ_ATTACK.format(files=[f"{tag}/answers.jsonl"], sockets=[])
        env = {"PATH": tools, "HOME": "/tmp", "PYTHONPATH": f"{core}:{packages}"}
        done = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, script,
                               attack], capture_output=True, text=True, timeout=120, env=env, cwd="/")
        if done.returncode != 0 and ("ModuleNotFoundError" in done.stderr or "Permission denied" in done.stderr):
            pytest.skip(f"user nobody cannot import polyrl with {python}: {done.stderr.strip().splitlines()[-1]}")
        assert done.returncode == 0, done.stderr[-2000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert got["level"] == "unshare" and got["status"] == "ok" and got["passed"] == [True], got
        assert '"expected": 42' not in got["output"] and f"DENIED {tag}" in got["output"], got["output"]
        assert got["filesystem"].startswith("a root of its own") and "the trainer's own uid" in got["filesystem"], got
    finally:
        shutil.rmtree(tag, ignore_errors=True)


@needs_unshare
@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("user", ["auto", "none"] if os.geteuid() == 0 else ["auto"])
def test_unshare_level_sample_that_leaves_its_process_group_dies_at_its_end(no_bwrap, user, fallback, monkeypatch):
    """The sample is PID 1 of its PID namespace, a child of util-linux ``unshare``, which the trainer
    kills with its process group. ``--kill-child`` was to take the sample with it, but the kernel
    drops that request at the privilege drop's uid change, and a sample may drop it itself: one
    that left the group (``setsid``) slept on after its sample with its memory, and its pooled uid
    went to the next sample. Now everything below the process started dies with it."""
    if fallback:
        _no_new_root(monkeypatch)
    python = _python_for(user)
    if python is None:
        pytest.skip("no interpreter user nobody can run")
    box = Sandbox(SandboxLimits(timeout_s=2, memory_mb=512, disk_mb=8), isolation="weak", user=user, python=python,
                  audit_hook=False)
    assert box.level == "unshare", box.report
    result, survivors = run_lingering(box, TESTS)
    assert result.status == "timeout" and "LEFT THE GROUP" in result.output, (result, result.output)
    assert survivors == [], survivors


#: Lists /dev, opens the host's device nodes a uid-0 sample without capabilities may open as their
#: owner (0600 root), and writes /dev/null.
DEVICE_ATTACK = """
import os
print("DEV", sorted(os.listdir("/dev")))
for name in ("console", "vcs", "kvm", "zram0", "loop0", "userfaultfd", "tty0", "ttyS0", "vda", "sda", "nvme0n1"):
    try:
        os.close(os.open("/dev/" + name, os.O_RDONLY | os.O_NONBLOCK))
        print("OPENED", name)
    except OSError as e:
        print("NOT", name, e.strerror)
with open("/dev/null", "w") as out:
    out.write("x")
print("NULL written")
"""


@needs_unshare
@pytest.mark.parametrize("user", ["auto", "none"] if os.geteuid() == 0 else ["auto"])
def test_unshare_level_host_view_shows_no_host_device(no_bwrap, user, monkeypatch):
    """The host view (where ``pivot_root`` is refused) kept the host's /dev, read-only, but a
    read-only mount does not stop opening a device node: a uid-0 sample (``user = "none"``),
    the owner of every 0600 node, opened the console, ``/dev/vcs`` (the console's text),
    ``/dev/kvm`` and ``/dev/zram0`` (swap: the trainer's swapped-out memory). Now its /dev holds
    null, zero, full, random and urandom only (and the emptied shm, pts, mqueue), as new_root's."""
    _no_new_root(monkeypatch)
    box = _weak_box(user)
    assert "host files read-only" in box.report["filesystem"], box.report
    result = box.run(DEVICE_ATTACK + GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], (result, result.output)
    shown = eval(next(line for line in result.output.splitlines() if line.startswith("DEV "))[4:])  # noqa: S307
    allowed = {"null", "zero", "full", "random", "urandom", "fd", "stdin", "stdout", "stderr", "shm", "pts", "mqueue"}
    assert set(shown) <= allowed, sorted(set(shown) - allowed)
    assert "OPENED" not in result.output and "NULL written" in result.output, result.output
    assert "a /dev of null, zero, full, random and urandom only" in box.report["filesystem"], box.report


#: Fills unix connections to a listener of its own, each client closed at once (the connection then
#: waits in the accept queue, holding what was sent and no descriptor), and datagrams to a socket of
#: its own from senders closed at once; prints how many of each the kernel queued.
UNIX_QUEUES = """
import socket
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("\\\\0polyrl-queue")
listener.listen(4096)
waiting = 0
for _ in range(20):
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.setblocking(False)
    try:
        client.connect("\\\\0polyrl-queue")
        client.send(b"x" * 65536)
        waiting += 1
    except BlockingIOError:
        break
    finally:
        client.close()
receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
receiver.bind("\\\\0polyrl-datagrams")
queued = 0
for _ in range(20):
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sender.sendto(b"x" * 65536, socket.MSG_DONTWAIT, "\\\\0polyrl-datagrams")
        queued += 1
    except BlockingIOError:
        break
    finally:
        sender.close()
print("QUEUED", waiting, queued)
"""


@needs_unshare
def test_unshare_level_keeps_unix_socket_queues_short(no_bwrap):
    """The ``unshare`` level's setup wrote none of the network namespace's limits bubblewrap's
    wrapper writes: a unix connection waiting in a listener's accept queue (4096 long), its client
    closed, held what the client sent (208 KB) and no descriptor, 68 MB in 300 of them from one
    listener; a datagram its sender left, 11 a socket. Now 8 + 1 and 1 + 1 (``new_root.UNIX_QUEUES``).
    The audit hook is off: it refuses sockets, but it is no wall at this level."""
    box = _weak_box("auto")
    result = box.run(UNIX_QUEUES + GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], (result, result.output)
    line = next((x for x in result.output.splitlines() if x.startswith("QUEUED ")), result.output)
    assert line == "QUEUED 9 2", line


@needs_unshare
@pytest.mark.parametrize("fallback", [False, True])
def test_unshare_level_sample_reads_no_host_name_of_the_machine(no_bwrap, fallback, monkeypatch):
    """The ``unshare`` level made no UTS namespace: a sample read the machine's host name (and NIS
    domain name) there. Now it has one of its own, named ``new_root.HOSTNAME`` by both setup
    programs (its root of its own and, ``fallback``, the read-only host view)."""
    from polyrl.sandbox import new_root

    if fallback:
        _no_new_root(monkeypatch)
    box = _weak_box("auto")
    code = ("import os\nprint('NAMES', os.uname().nodename, open('/proc/sys/kernel/hostname').read().strip(), "
            "open('/proc/sys/kernel/domainname').read().strip())\n")
    result = box.run(code + GOOD, TESTS)
    assert result.status == "ok" and result.passed == [True], (result, result.output)
    names = next((x for x in result.output.splitlines() if x.startswith("NAMES ")), result.output)
    assert names == f"NAMES {new_root.HOSTNAME} {new_root.HOSTNAME} (none)", names


@needs_unshare
@pytest.mark.skipif(os.geteuid() != 0, reason="a sample keeps uid 0 only when the trainer is root")
@pytest.mark.parametrize("fallback", [False, True])
def test_unshare_level_root_sample_reads_no_root_only_kernel_file(no_bwrap, fallback, monkeypatch):
    """A root sample (``user = "none"``) read the kernel's mode-0400 ``/proc`` files as their owner
    (every physical page's flags, the kernel heap's caches) in its own ``/proc``; both setup
    programs bind /dev/null over them now (``new_root.ROOT_ONLY_PROC``)."""
    if fallback:
        _no_new_root(monkeypatch)
    box = _weak_box("none")
    result = box.run(ROOT_ONLY_PROC + GOOD, parse_tests("assert root_only_read() == {}\n"))
    assert result.status == "ok" and result.passed == [True], (result, result.output)
