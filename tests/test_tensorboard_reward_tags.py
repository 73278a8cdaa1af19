"""TensorBoard files a run writes: readable by TensorBoard's Rust data server, and a reward's tags
its own, whatever its name.

RustBoard ("RustBoard", ``tensorboard --load_fast``) reads an event file only after its first
record, the file-version event (``brain.Event:2``), as tensorboard's own ``EventFileWriter`` writes
it. Tags are read back with TensorBoard's own readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.cli import main
from polyrl.config import RewardSection

from toy_dist import toy_site, write_dist

pytest.importorskip("tensorboard")

#: two registered rewards: "acc", with a metric of its own named "strict/mean", and "acc/strict"
PLUGIN = """from polyrl.hookspecs import hookimpl
from polyrl.types import RewardScores, RewardSpec
@hookimpl
def polyrl_register_rewards(register):
    register(RewardSpec(name="acc", summary="a"))
    register(RewardSpec(name="acc/strict", summary="b"))
@hookimpl
def reward(prompts, completions, context):
    out = {}
    if "acc" in context.wanted:
        out["acc"] = RewardScores([0.5] * len(completions), metrics={"strict/mean": 9.0})
    if "acc/strict" in context.wanted:
        out["acc/strict"] = [0.25] * len(completions)
    return out
"""


def _trained(tmp_path: Path, monkeypatch, capsys) -> Path:
    with toy_site(tmp_path, monkeypatch) as (site, modules):
        (site / "polyrl_acc_rewards.py").write_text(PLUGIN)
        write_dist(site, "polyrl-acc-rewards", "1.0", {"polyrl.rewards": {"accrewards": "polyrl_acc_rewards"}})
        modules.append("polyrl_acc_rewards")
        config = tmp_path / "run.toml"
        config.write_text(f"""
[model]
path = "toy-model"
[backends]
train = "toy"
[data]
task = "arithmetic"
[[rewards]]
name = "acc"
[[rewards]]
name = "acc/strict"
[train]
steps = 1
prompts_per_step = 2
output_dir = "{tmp_path / 'run'}"
[logging]
report_to = ["tensorboard"]
""")
        code = main(["train", str(config), "--no-progress"])
        assert code == 0, capsys.readouterr().err
    return tmp_path / "run" / "tensorboard"


def test_a_reward_named_with_a_slash_has_tags_of_its_own_beside_another_rewards_metric(tmp_path, monkeypatch, capsys):
    """Once: the registered reward ``acc/strict`` was labelled as named, so its mean was
    ``reward/acc/strict/mean``: the tag of reward ``acc``'s own ``strict/mean`` metric (one value
    overwrote the other) and, in TensorBoard, nested among ``acc``'s curves. Its label is
    ``acc_strict`` now, as for a function so named through the Python API."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert RewardSection(name="acc/strict").label == "acc_strict"
    acc = EventAccumulator(str(_trained(tmp_path, monkeypatch, capsys)), size_guidance={"scalars": 0})
    acc.Reload()
    values = {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert values["reward/acc/mean"] == [0.5] and values["reward/acc/strict/mean"] == [9.0]
    assert values["reward/acc_strict/mean"] == [0.25]
    under_acc = sorted(t[len("reward/acc/"):] for t in values if t.startswith("reward/acc/"))
    assert under_acc == ["latency_s", "mean", "none_count", "std", "strict/mean"]  # acc's own, nothing else


def test_each_event_file_starts_with_the_file_version_event_rustboard_needs(tmp_path, monkeypatch, capsys):
    """Every file of the run (here two: a run, then a second session into the same folder) begins
    with ``file_version: "brain.Event:2"``, read with tensorboard's raw record reader, and
    TensorBoard's EventAccumulator reads that version."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2

    from polyrl.registry import get_registry
    from polyrl.tracking.session import RunTracking

    folder = _trained(tmp_path, monkeypatch, capsys)
    tracking = RunTracking(specs=[get_registry().trackers_by_name()["tensorboard"]], output_dir=tmp_path / "run",
                           completions_per_step=0, run_name="r", project="p", config={})
    tracking.open()
    tracking.publish({"step": 2, "loss": 0.5})
    tracking.close()
    files = sorted(folder.glob("events.out.tfevents.*"))
    assert len(files) == 2
    for path in files:
        first = event_pb2.Event.FromString(next(iter(RawEventFileLoader(str(path)).Load())))
        assert first.file_version == "brain.Event:2" and not first.HasField("summary"), path
    acc = EventAccumulator(str(folder))
    acc.Reload()
    assert acc.file_version == 2.0
