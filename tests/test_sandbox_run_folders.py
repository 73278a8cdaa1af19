"""The run's own folders (``train.output_dir``, the dataset's) are hidden from samples wherever
they lie, not only the trainer's working folder and home.

Every sample gets ``/usr`` read-only (bubblewrap's view, the ``unshare`` level's root of its own
and its host view), and only the working folder and home were hidden there: a run writing to
``/usr/local/share/<run>`` and reading its dataset from ``/usr/local/src/<data>`` showed samples
the run's config and the expected answers. The trainer registers them (``polyrl.sandbox_hidden``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from bwrap_util import WHY_NOT
from test_sandbox_escapes import _without_bwrap

from polyrl.rewards.code import parse_tests
from polyrl.sandbox import Sandbox, SandboxLimits, runner

pytestmark = pytest.mark.faults

TESTS = parse_tests("assert add(1, 2) == 3\n")
GOOD = "def add(a, b):\n    return a + b\n"
PROBE = """
import os
for path in ({answers!r}, {config!r}):
    try:
        print("READ", path, open(path).read().strip())
    except OSError as e:
        print("DENIED", path, e.strerror)
for folder in ({data!r}, {out!r}):
    try:
        print("SEES", folder, sorted(os.listdir(folder)))
    except OSError as e:
        print("NOLIST", folder, e.strerror)
"""


def _fresh_registry(monkeypatch, tmp_path, isolation_option: str, fallback: bool) -> None:
    """Nothing registered yet and no launch cached; the weak level without bubblewrap, and the
    host view (``fallback``: pivot_root refused, as on a root on the initramfs) where the test asks for it."""
    from polyrl import sandbox_hidden

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sandbox_hidden, "_folders", [])
    monkeypatch.setattr(sandbox_hidden, "_paths", [])
    monkeypatch.setattr(runner, "_launches", {})
    if isolation_option == "weak":
        _without_bwrap(monkeypatch, str(tmp_path / "bin"))
    if fallback:
        from polyrl.sandbox import new_root

        monkeypatch.setattr(new_root, "pivot_root_number", lambda: None)


def _skip_unless_usable(isolation_option: str, fallback: bool, *folders: str) -> None:
    """Skip, naming what is missing, unless root may write in ``folders`` and the level runs here."""
    if os.geteuid() != 0 or not all(os.path.isdir(f) for f in folders):
        pytest.skip(f"needs root to write in {' and '.join(folders)}")
    if isolation_option == "require" and WHY_NOT is not None:
        pytest.skip(f"bubblewrap does not work here: {WHY_NOT}")
    if fallback and not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3, an interpreter user nobody can run")


@pytest.mark.parametrize("isolation_option,fallback", [("require", False), ("weak", False), ("weak", True)])
def test_the_runs_output_dir_and_dataset_inside_usr_are_hidden(isolation_option, fallback, tmp_path, monkeypatch):
    """The trainer's working folder is elsewhere (``tmp_path``); its output_dir is in
    /usr/local/share and does not exist yet when the sandbox is built (the setup check runs before
    the run makes it), its dataset in /usr/local/src. The sample read both. Now each is an empty
    read-only folder for it, and a right solution still scores. ``fallback``: the ``unshare``
    level's host view (where ``pivot_root`` is refused), which hid no folder inside /usr at all."""
    _skip_unless_usable(isolation_option, fallback, "/usr/local/share", "/usr/local/src")
    from polyrl import sandbox_hidden

    tag = f"polyrl-run-folders-{os.getpid()}-{isolation_option}-{fallback}"
    out, data = f"/usr/local/share/{tag}", f"/usr/local/src/{tag}"
    _fresh_registry(monkeypatch, tmp_path, isolation_option, fallback)  # fallback: a root on the initramfs
    os.makedirs(data)
    try:
        with open(f"{data}/train.jsonl", "w") as f:
            f.write('{"expected": "ANSWER-42"}\n')
        sandbox_hidden.hide_from_samples([out, f"{data}/*.jsonl", None])
        # an interpreter nobody runs: in the host view a root trainer's own under /root is not
        python = "/usr/bin/python3" if fallback else sys.executable
        box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=python,
                      isolation=isolation_option, audit_hook=False)
        assert box.level == ("bwrap" if isolation_option == "require" else "unshare"), box.report
        assert ("host files read-only" in box.report["filesystem"]) == fallback, box.report
        os.makedirs(out)  # the run starts: its output_dir is made
        with open(f"{out}/config.toml", "w") as f:
            f.write("secret = 'RUN-CONFIG'\n")
        probe = PROBE.format(answers=f"{data}/train.jsonl", config=f"{out}/config.toml", data=data, out=out)
        result = box.run(probe + GOOD, TESTS)
        assert result.passed == [True], result
        assert "ANSWER-42" not in result.output and "RUN-CONFIG" not in result.output, result.output
        assert f"SEES {data} []" in result.output and f"SEES {out} []" in result.output, result.output
        assert out in box.report["filesystem"] and data in box.report["filesystem"], box.report
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)


def test_folder_of_a_dataset_path():
    """A file's folder, a glob's folder before its first pattern, a folder (made or not) itself."""
    from polyrl.sandbox_hidden import folder_of

    assert folder_of(sys.executable) == os.path.dirname(os.path.abspath(sys.executable))
    assert folder_of("/srv/data/*/train-*.jsonl") == "/srv/data"
    assert folder_of("/srv/not-made-yet") == "/srv/not-made-yet"
    assert folder_of("~/runs/x") == os.path.expanduser("~/runs/x")


def test_a_dataset_glob_is_matched_again_only_when_its_folder_changed(tmp_path, monkeypatch):
    """Each sample's launch asks for the run's dataset files: a glob over 20k shards took ~0.4 s
    a launch. They are matched again only when a registered path or its folder changed (a file
    made or removed there changes the folder's modification time)."""
    import glob

    from polyrl import sandbox_hidden

    monkeypatch.setattr(sandbox_hidden, "_folders", [])
    monkeypatch.setattr(sandbox_hidden, "_paths", [])
    monkeypatch.setattr(sandbox_hidden, "_found", {}, raising=False)  # main had none
    for i in range(3):
        (tmp_path / f"shard-{i}.jsonl").write_text("{}\n")
    globs = []
    real_glob = glob.glob
    monkeypatch.setattr(glob, "glob", lambda pattern, *a, **k: globs.append(pattern) or real_glob(pattern, *a, **k))
    sandbox_hidden.hide_from_samples([str(tmp_path / "shard-*.jsonl")])
    first = sandbox_hidden.files()
    assert len(first) == 3 and sandbox_hidden.state() == sandbox_hidden.state()
    assert sandbox_hidden.files() == first and len(globs) == 1  # three launches, one glob
    (tmp_path / "shard-3.jsonl").write_text("{}\n")
    os.utime(tmp_path, ns=(10**18, 10**18))  # the folder changed (beyond the timestamp tick)
    assert len(sandbox_hidden.files()) == 4 and len(globs) == 2
    sandbox_hidden.hide_from_samples([str(tmp_path / "eval-*.jsonl")])  # another path registered
    sandbox_hidden.files()
    assert len(globs) == 4  # both matched again


def test_the_trainer_registers_its_output_dir_and_dataset_folders(tiny_model_dir, tmp_path, monkeypatch):
    """Building a ``Trainer`` (before any reward runs, without loading a model) registers the
    run's output_dir (not made yet) and the folders of its data.path and data.eval_path."""
    pytest.importorskip("polyrl_torch")
    from polyrl import sandbox_hidden
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    monkeypatch.setattr(sandbox_hidden, "_folders", [])
    monkeypatch.setattr(sandbox_hidden, "_paths", [])
    for name in ("train", "held"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rows.jsonl").write_text("".join(f'{{"prompt": "{i} + 1 =", "answer": "{i + 1}"}}\n'
                                                            for i in range(4)))
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir}, "rewards": [{"name": "numeric_match"}], "backends": {"train": "torch"},
        "data": {"path": str(tmp_path / "train" / "rows.jsonl"), "eval_path": str(tmp_path / "held" / "*.jsonl")},
        "eval": {"count": 2},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    Trainer(config, check_only=True)
    assert sandbox_hidden.hidden() == [str(tmp_path / "run"), str(tmp_path / "train"), str(tmp_path / "held")]
    assert not (tmp_path / "run").exists()


FILE_PROBE = """
for path in {paths!r}:
    try:
        print("READ", path, repr(open(path).read().strip()))
    except OSError as e:
        print("DENIED", path, e.strerror)
"""


@pytest.mark.parametrize("isolation_option,fallback", [("require", False), ("weak", False), ("weak", True)])
def test_a_dataset_file_directly_in_a_system_folder_is_hidden(isolation_option, fallback, tmp_path, monkeypatch):
    """A dataset file lying directly in a folder that is never hidden (``/usr/local/share``, which
    the sample's root holds as part of /usr; ``/opt``, which the host view shows whole) was read by
    samples: its folder could not be hidden. Each such file is covered by itself now (/dev/null
    over it): the sample reads nothing of it, a file beside it stays readable, and a right
    solution still scores."""
    _skip_unless_usable(isolation_option, fallback, "/usr/local/share", "/opt")
    from polyrl import sandbox_hidden

    tag = f"polyrl-data-file-{os.getpid()}-{isolation_option}-{fallback}"
    data, other, elsewhere = f"/usr/local/share/{tag}.jsonl", f"/usr/local/share/{tag}.txt", f"/opt/{tag}.jsonl"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sandbox_hidden, "_folders", [])
    monkeypatch.setattr(sandbox_hidden, "_paths", [], raising=False)  # main had none
    monkeypatch.setattr(runner, "_launches", {})
    if isolation_option == "weak":
        _without_bwrap(monkeypatch, str(tmp_path / "bin"))
    if fallback:
        from polyrl.sandbox import new_root

        monkeypatch.setattr(new_root, "pivot_root_number", lambda: None)
    try:
        for path, text in ((data, '{"expected": "ANSWER-42"}'), (other, "NOT-THE-RUNS"),
                           (elsewhere, '{"expected": "ANSWER-43"}')):
            with open(path, "w") as f:
                f.write(text + "\n")
            os.chmod(path, 0o644)
        sandbox_hidden.hide_from_samples([data, f"/opt/{tag}*.jsonl"])
        python = "/usr/bin/python3" if fallback else sys.executable
        box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=python,
                      isolation=isolation_option, audit_hook=False)
        assert ("host files read-only" in box.report["filesystem"]) == fallback, box.report
        # the report (and the startup log line) names it a file covered, never a folder hidden
        report = box.report["filesystem"]
        assert "the run's dataset files " in report, report
        covered = report.split("the run's dataset files ", 1)[1].split(" covered by an empty file each", 1)[0]
        assert data in covered.split(", ") and report.count(data) == 1, report
        result = box.run(FILE_PROBE.format(paths=[data, other, elsewhere]) + GOOD, TESTS)
        assert result.passed == [True], result
        assert "ANSWER-42" not in result.output and "ANSWER-43" not in result.output, result.output
        assert f"READ {other} 'NOT-THE-RUNS'" in result.output, result.output  # its folder stays in view
    finally:
        for path in (data, other, elsewhere):
            if os.path.lexists(path):
                os.unlink(path)


@pytest.mark.parametrize("isolation_option,fallback", [("require", False), ("weak", False), ("weak", True)])
def test_a_dataset_file_inside_the_interpreters_venv_is_hidden(isolation_option, fallback, tmp_path, monkeypatch,
                                                                 request):
    """A dataset file inside the folders bound for the interpreter (a package's data under its
    venv's ``lib``) lies outside every view ``in_view_files`` looked at and in no hidden folder,
    so samples read it through the interpreter's bind (bubblewrap, the ``unshare`` level's own
    root) or the folders bound back (host view). It is covered by /dev/null after those binds
    now; a file beside it stays readable, and a right solution still scores."""
    if isolation_option == "require" and WHY_NOT is not None:
        pytest.skip(f"bubblewrap does not work here: {WHY_NOT}")
    base = "/usr/bin/python3" if fallback or os.geteuid() == 0 else sys.executable
    if not os.access(base, os.X_OK):
        pytest.skip(f"needs {base}")
    from polyrl import sandbox_hidden

    # the host view runs the venv's interpreter as the sample's uid: a folder every user can reach
    top = Path(tempfile.mkdtemp(prefix="polyrl-venv-", dir="/var/tmp")) if fallback else tmp_path
    os.chmod(top, 0o755)
    if fallback:
        request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    venv = top / "venv"
    made = subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"{base} makes no venv here: {made.stderr[-200:]}")
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    package = venv / os.path.relpath(site, venv) / "polyrl_probe_data"
    package.mkdir(parents=True)
    data, other = package / "train.jsonl", package / "README.txt"
    data.write_text('{"expected": "ANSWER-44"}\n')
    other.write_text("NOT-THE-RUNS\n")
    _fresh_registry(monkeypatch, tmp_path, isolation_option, fallback)
    sandbox_hidden.hide_from_samples([str(data)])
    box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=str(venv / "bin" / "python"),
                  isolation=isolation_option, audit_hook=False)
    assert ("host files read-only" in box.report["filesystem"]) == fallback, box.report
    result = box.run(FILE_PROBE.format(paths=[str(data), str(other)]) + GOOD, TESTS)
    assert result.passed == [True], result
    assert "ANSWER-44" not in result.output, (box.report, result.output)
    assert f"READ {other} 'NOT-THE-RUNS'" in result.output, result.output  # the venv stays in view


def test_a_dataset_file_directly_in_tmp_keeps_the_host_view(tmp_path, monkeypatch):
    """A dataset file lying directly in /tmp (a folder never hidden) was a file to cover in the host
    view, whose setup mounts the sample's own /tmp first: the bind over the file, gone under it,
    failed (ENOENT), so the read-only host view was refused and samples ran with the host's files
    in view, writable where permissions allow, the dataset file among them. The file is nothing
    to cover there now (the sample's /tmp holds none of the host's): the view stands, the sample
    reads no such file and a right solution scores."""
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3, an interpreter user nobody can run")
    from polyrl import sandbox_hidden
    from polyrl.sandbox import new_root

    data = f"/tmp/polyrl-data-in-tmp-{os.getpid()}.jsonl"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sandbox_hidden, "_folders", [])
    monkeypatch.setattr(sandbox_hidden, "_paths", [])
    _without_bwrap(monkeypatch, str(tmp_path / "bin"))
    monkeypatch.setattr(new_root, "pivot_root_number", lambda: None)
    try:
        with open(data, "w") as f:
            f.write('{"expected": "ANSWER-45"}\n')
        os.chmod(data, 0o644)
        sandbox_hidden.hide_from_samples([data])
        box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python="/usr/bin/python3",
                      isolation="weak", audit_hook=False)
        if "pivot_root" not in box.report["filesystem"] and "host files read-only" not in box.report["filesystem"]:
            pytest.skip(f"the host view does not start here: {box.report['filesystem'][:200]}")
        assert "host files read-only" in box.report["filesystem"], box.report
        result = box.run(FILE_PROBE.format(paths=[data]) + GOOD, TESTS)
        assert result.passed == [True], result
        assert "ANSWER-45" not in result.output, result.output
    finally:
        if os.path.lexists(data):
            os.unlink(data)


@pytest.mark.parametrize("isolation_option,fallback", [("require", False), ("weak", False), ("weak", True)])
def test_a_folder_a_dataset_glob_matches_is_hidden(isolation_option, fallback, tmp_path, monkeypatch):
    """A registered glob whose own folder is never hidden (``/usr/local/share/<run>-*``) and that
    matches a folder (``<run>-1/``, holding the dataset) hid nothing of it: ``files`` takes regular
    files only, so samples read the folder's files. Such a folder is hidden as a registered one is
    now; a file beside it stays readable, and a right solution still scores."""
    if os.geteuid() != 0 or not os.path.isdir("/usr/local/share"):
        pytest.skip("needs root to write folders in /usr/local/share")
    if isolation_option == "require" and WHY_NOT is not None:
        pytest.skip(f"bubblewrap does not work here: {WHY_NOT}")
    if fallback and not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3, an interpreter user nobody can run")
    from polyrl import sandbox_hidden

    tag = f"polyrl-glob-folder-{os.getpid()}-{isolation_option}-{fallback}"
    folder, beside = f"/usr/local/share/{tag}-1", f"/usr/local/share/{tag}.txt"
    data = f"{folder}/train.jsonl"
    _fresh_registry(monkeypatch, tmp_path, isolation_option, fallback)
    try:
        os.mkdir(folder, 0o755)
        for path, text in ((data, '{"expected": "ANSWER-46"}'), (beside, "NOT-THE-RUNS")):
            with open(path, "w") as f:
                f.write(text + "\n")
            os.chmod(path, 0o644)
        sandbox_hidden.hide_from_samples([f"/usr/local/share/{tag}-*"])
        python = "/usr/bin/python3" if fallback else sys.executable
        box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=python,
                      isolation=isolation_option, audit_hook=False)
        assert ("host files read-only" in box.report["filesystem"]) == fallback, box.report
        result = box.run(FILE_PROBE.format(paths=[data, beside]) + GOOD, TESTS)
        assert result.passed == [True], result
        assert "ANSWER-46" not in result.output, result.output
        assert f"READ {beside} 'NOT-THE-RUNS'" in result.output, result.output
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if os.path.lexists(beside):
            os.unlink(beside)


@pytest.mark.parametrize("isolation_option,fallback", [("require", False), ("weak", False), ("weak", True)])
def test_a_dataset_file_that_vanishes_as_the_sample_starts_costs_it_nothing(isolation_option, fallback, tmp_path,
                                                                             monkeypatch):
    """A covered dataset file removed between ``sandbox_hidden.state()`` and the launch (a shard
    rewritten, a temp copy removed) made bubblewrap stop before the sample ran ("Can't create file
    at ...: Read-only file system": its mount point was gone in the read-only /usr), and a right
    sample was "crashed", scoring 0, with no word of why. Here the file goes right before the
    sample's process starts: the sample is started again without it and scores."""
    _skip_unless_usable(isolation_option, fallback, "/usr/local/share")
    from polyrl import sandbox_hidden

    data = f"/usr/local/share/polyrl-vanishing-{os.getpid()}-{isolation_option}-{fallback}.jsonl"
    _fresh_registry(monkeypatch, tmp_path, isolation_option, fallback)
    starts = []

    class RemovedFirst(subprocess.Popen):  # the race, made certain: the file goes as the first sample starts
        def __init__(self, *args, **kwargs):
            if not starts and os.path.lexists(data):
                os.unlink(data)
            starts.append(args[0][0])
            super().__init__(*args, **kwargs)

    try:
        with open(data, "w") as f:
            f.write('{"expected": "ANSWER-46"}\n')
        sandbox_hidden.hide_from_samples([data])
        python = "/usr/bin/python3" if fallback else sys.executable
        box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), python=python,
                      isolation=isolation_option, audit_hook=False)
        assert data in box.report["filesystem"], box.report
        monkeypatch.setattr(runner.subprocess, "Popen", RemovedFirst)
        result = box.run(GOOD, TESTS)
        assert not os.path.lexists(data) and starts
        assert result.status == "ok" and result.passed == [True], (result, result.output)
        assert "Can't create file" not in result.output, result.output
    finally:
        if os.path.lexists(data):
            os.unlink(data)


def test_a_launch_that_still_covers_a_vanished_file_fails_the_sample_with_the_reason(tmp_path, monkeypatch):
    """Where the launch built again still covered the vanished file (here it is not built again),
    the sample fails closed, as before, and its error says why instead of "ended without an answer"."""
    _skip_unless_usable("require", False, "/usr/local/share")
    from polyrl import sandbox_hidden

    data = f"/usr/local/share/polyrl-vanished-{os.getpid()}.jsonl"
    _fresh_registry(monkeypatch, tmp_path, "require", False)
    try:
        with open(data, "w") as f:
            f.write('{"expected": "ANSWER-47"}\n')
        sandbox_hidden.hide_from_samples([data])
        box = Sandbox(SandboxLimits(timeout_s=8, memory_mb=512, disk_mb=8), isolation="require", audit_hook=False)
    finally:
        os.unlink(data)
    monkeypatch.setattr(box, "_hide_new_folders", lambda: None)  # the launch stays the one that covers it
    result = box.run(GOOD, TESTS)
    assert result.status == "crashed" and result.fraction == 0.0, result
    assert f"could not cover the run's dataset files {data}: they vanished" in (result.error or ""), result
