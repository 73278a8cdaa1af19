"""model.device is checked by its spelling when the config loads (polyrl.device_names), so a name
no backend reads fails the dry run and the first seconds of a run, not the engine load."""

from __future__ import annotations

import pytest

from polyrl.cli import main
from polyrl.config import ModelSection, RunConfig
from polyrl.errors import ConfigError

CONFIG = """
[model]
path = "tiny-llama"
device = "cpu"
[data]
task = "arithmetic"
[[rewards]]
name = "numeric_match"
"""


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps", "gpu", "gpu:1", "metal",
                                    "xpu:0"])
def test_every_name_a_backend_reads_loads(device):
    assert ModelSection(path="m", device=device).device == device


@pytest.mark.parametrize(("device", "fix"), [
    ("abc", "use auto, cpu, cuda, cuda:N, mps or gpu"),
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
    assert fix in str(info.value) and repr(device) in str(info.value)


@pytest.mark.parametrize(("given", "read"), [("GPU", "gpu"), ("Metal", "metal"), (" CUDA ", "cuda"),
                                             ("Cuda:1", "cuda:1"), (" cpu", "cpu"), ("AUTO", "auto")])
def test_a_name_in_other_case_or_with_spaces_loads_as_the_backends_read_it(given, read):
    """MLX lower-cases the name (``device = "GPU"`` ran there), MAX strips and lower-cases it: the
    check refused such configs at load. The name is kept as every backend reads it, torch included."""
    config = RunConfig.from_dict({"model": {"path": "m", "device": given}, "data": {"task": "arithmetic"},
                                  "rewards": [{"name": "numeric_match"}]})
    assert config.model.device == read


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
        "error: model.device: unknown device 'abc'. Fix: use auto, cpu, cuda, cuda:N, mps or gpu "
        "(which a backend takes: `polyrl backends`)"]
