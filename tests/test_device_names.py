"""model.device is checked by its spelling before any engine loads (polyrl.device_names): polyrl's
own backends' names when the config loads, so a name they do not read fails the dry run and the
first seconds of a run, not the engine load; a third-party backend's by the names its plugin
declares (``Capabilities.device_names``), and not at all when it declares none."""

from __future__ import annotations

import attrs
import pytest

from polyrl.cli import main
from polyrl.config import ModelSection, RunConfig
from polyrl.device_names import BUILTIN_DEVICE_NAMES, declared_names
from polyrl.engines import check_backend_devices, check_engines
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.types import BackendSpec, Capabilities

CONFIG = """
[model]
path = "tiny-llama"
device = "cpu"
[data]
task = "arithmetic"
[[rewards]]
name = "numeric_match"
"""

TORCH_NAMES = "use auto, cpu[:N], cuda[:N], mps[:N] or xpu[:N] (the names backend 'torch' reads)"


def _run(device, **backends) -> RunConfig:
    return RunConfig.from_dict({"model": {"path": "m", "device": device}, "data": {"task": "arithmetic"},
                                "rewards": [{"name": "numeric_match"}], "backends": backends})


def _examples(backend: str) -> list[str]:
    names = BUILTIN_DEVICE_NAMES[backend] or ()
    return ["auto", *(n.replace(":N", ":0") if n.endswith(":N") else n for n in names), *
            (n.replace(":N", ":12") for n in names if n.endswith(":N"))]


@pytest.mark.parametrize(("backend", "device"), [(b, d) for b in ("torch", "mlx", "max") for d in _examples(b)])
def test_every_name_a_builtin_backend_reads_loads_with_it(backend, device):
    assert _run(device, train=backend).model.device == device


def test_model_section_alone_does_not_judge_the_name():
    """It does not know which backend reads it: ``RunConfig`` does."""
    assert ModelSection(path="m", device="npu:0").device == "npu:0"


@pytest.mark.parametrize(("device", "fix"), [
    ("abc", TORCH_NAMES),
    ("cdua", "did you mean 'cuda'?"),
    ("cuda:x", "write it as 'cuda' or 'cuda:N'"),
    ("CUDA:x", "write it as 'cuda' or 'cuda:N'"),
    ("auto:0", "use 'auto'"),
    ("", "use auto, cpu"),
])
def test_a_name_no_backend_reads_is_refused_at_load_naming_the_field_and_the_fix(device, fix):
    with pytest.raises(ConfigError, match=r"^model\.device: ") as info:
        RunConfig.from_dict({"model": {"path": "m", "device": device}, "data": {"task": "arithmetic"},
                             "rewards": [{"name": "numeric_match"}]})
    assert fix in str(info.value) and repr(device.lower()) in str(info.value)  # as the backends read it


@pytest.mark.parametrize(("device", "backends"), [
    ("gpu", {"train": "torch"}),  # MLX's and MAX's name: torch.device("gpu") raises at engine load
    ("metal", {"train": "torch"}),
    ("cuda:0", {"train": "mlx"}),  # MLX reads no index
    ("xpu", {"train": "max"}),
    ("gpu", {"train": "mlx", "generate": "torch"}),  # every engine of the run gets model.device
])
def test_a_name_another_builtin_backend_reads_is_refused_for_the_runs_backend(device, backends):
    """Before: the union of every backend's names was checked, so ``device = "gpu"`` with torch
    loaded and failed when the engine loaded."""
    with pytest.raises(ConfigError, match=r"^model\.device: ") as info:
        _run(device, **backends)
    assert repr(device) in str(info.value) and "backend" in str(info.value)


@pytest.mark.parametrize("device", ["npu:0", "hpu", "tpu", "ane", "GPU"])
def test_a_third_party_backend_is_not_refused_at_load(device):
    """Before: every config was checked against the built-in backends' names, so a plugin's
    ``npu:0`` was refused before its plugin was asked."""
    assert _run(device, train="npu_backend").model.device == device.lower()


def test_a_third_party_generator_beside_torch_gets_torchs_check():
    with pytest.raises(ConfigError, match=r"^model\.device: unknown device 'npu:0' for backend 'torch'"):
        _run("npu:0", train="torch", generate="npu_backend")


@pytest.mark.parametrize(("given", "read", "backend"), [
    ("GPU", "gpu", "mlx"), ("Metal", "metal", "mlx"), ("GPU:1", "gpu:1", "max"), (" CUDA ", "cuda", "torch"),
    ("Cuda:1", "cuda:1", "torch"), (" cpu", "cpu", "torch"), ("AUTO", "auto", "torch")])
def test_a_name_in_other_case_or_with_spaces_loads_as_the_backends_read_it(given, read, backend):
    """MLX lower-cases the name (``device = "GPU"`` ran there), MAX strips and lower-cases it: the
    check refused such configs at load. The name is kept as every backend reads it, torch included."""
    assert _run(given, train=backend).model.device == read


def test_a_device_that_is_no_string_is_refused():
    with pytest.raises(ConfigError, match=r"model\.device"):
        ModelSection(path="m", device=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", ["launch", "train"])
def test_the_dry_run_and_a_run_refuse_a_bad_device_in_one_error_line(tmp_path, capsys, command):
    """Before: ``polyrl launch --dry-run --set model.device=abc`` printed the torchrun command."""
    pytest.importorskip("torch")  # polyrl launch needs torchrun
    path = tmp_path / "run.toml"
    path.write_text(CONFIG)
    args = [command, str(path), "--set", "model.device=abc", "--output-dir", str(tmp_path / "out")]
    if command == "launch":
        args += ["--dry-run", "--nproc-per-node", "1"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "torch.distributed.run" not in captured.out
    assert captured.err.strip().splitlines() == [
        f"error: model.device: unknown device 'abc' for backend 'torch'. Fix: {TORCH_NAMES}"]


def _registry(**declared: tuple[str, ...] | None) -> Registry:
    """A registry with one third-party backend per keyword, declaring those device names."""

    class Declares:
        @hookimpl
        def polyrl_register_backends(self, register):
            for name, names in declared.items():
                register(BackendSpec(name=name, load=lambda config: None,
                                     capabilities=Capabilities(device_names=names)))

    return Registry(get_plugin_manager(extra=[Declares()]))


def _config(device: str, **backends: str) -> RunConfig:
    base = _run("auto")
    return attrs.evolve(base, model=attrs.evolve(base.model, device=device),
                        backends=attrs.evolve(base.backends, **backends))


def test_a_third_party_backend_declaring_no_names_takes_any_device():
    check_backend_devices(_config("npu:0", train="npu_backend"), _registry(npu_backend=None))


def test_a_third_party_backend_declaring_names_gets_its_own_names_checked():
    reg = _registry(npu_backend=("npu", "NPU:N", "ane"))
    for device in ("npu", "npu:0", "npu:7", "ane", "auto"):
        check_backend_devices(_config(device, train="npu_backend"), reg)
    for device, fix in [("cuda", "use auto, npu[:N] or ane (the names backend 'npu_backend' reads)"),
                        ("nup:0", "did you mean 'npu'?"), ("ane:0", "use 'ane'"), ("npu:x", "write it as 'npu' or 'npu:N'")]:
        with pytest.raises(ConfigError, match=r"^model\.device: ") as info:
            check_backend_devices(_config(device, train="npu_backend"), reg)
        assert fix in str(info.value) and "'npu_backend'" in str(info.value), str(info.value)


def test_an_index_only_name_needs_its_index():
    reg = _registry(npu_backend=("npu:N",))
    with pytest.raises(ConfigError, match=r"needs an index.*Fix: write it as 'npu:N'"):
        check_backend_devices(_config("npu", train="npu_backend"), reg)


def test_every_backend_of_the_run_reads_the_device_the_engines_get():
    reg = _registry(npu_gen=("npu:N",), anything=None)
    check_backend_devices(_config("npu:0", train="anything", generate="npu_gen"), reg)
    with pytest.raises(ConfigError, match=r"unknown device 'cpu' for backend 'npu_gen'"):
        check_backend_devices(_config("cpu", train="anything", generate="npu_gen"), reg)


def test_check_engines_refuses_a_declared_backends_device_before_any_model_is_looked_up():
    """The dry run (``check_run``) and a run call ``check_engines``: the model path "m" is never resolved."""
    with pytest.raises(ConfigError, match=r"^model\.device: unknown device 'gpu' for backend 'npu_backend'"):
        check_engines(_config("gpu", train="npu_backend"), _registry(npu_backend=("npu",)))


@pytest.mark.parametrize("bad", ["npu", ["NPU X"], ["npu:0"], ["npu:n:N"], [""], [3]])
def test_a_malformed_declaration_is_the_plugins_error(bad):
    with pytest.raises(ValueError, match="device_names"):
        declared_names(bad)


def test_a_register_hook_declaring_malformed_names_is_a_load_error_naming_the_plugin():
    reg = _registry(npu_backend="npu:0")  # type: ignore[arg-type]
    assert "npu_backend" not in reg.names()
    assert any("device_names" in e.error for e in reg.load_errors_of("backends"))


@pytest.mark.parametrize("backend", ["torch", "mlx", "max"])
def test_the_builtin_plugins_declare_the_names_the_config_checks(backend):
    from polyrl.registry import get_registry

    reg = get_registry()
    if backend not in reg.names():
        pytest.skip(f"{backend}'s plugin is not installed here")
    assert reg.spec(backend).capabilities.device_names == BUILTIN_DEVICE_NAMES[backend]


def test_the_torch_table_is_what_torch_device_reads():
    """Each declared name parses as a torch device and a name left out does not: the table the
    config checks is torch's own, neither narrower (a refused run torch would take) nor wider."""
    torch = pytest.importorskip("torch")
    for device in _examples("torch")[1:]:
        torch.device(device)
    for device in ("gpu", "metal", "abc", "cuda:x"):
        with pytest.raises(RuntimeError):
            torch.device(device)
