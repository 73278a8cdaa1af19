"""The built-in trackers against the real libraries: one short run of the tiny llama reports to
TensorBoard, W&B (offline), MLflow (local file store) and trackio at once, then each library's own
reader reads back what it wrote: the scalars per step (``lr`` unrounded) and the completions table,
which must hold exactly the records of ``completions.jsonl``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


# looked up, not imported: trackio fixes its store folder when first imported
_missing = [lib for lib in ("tensorboard", "wandb", "mlflow", "trackio") if importlib.util.find_spec(lib) is None]
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"not installed: {_missing} (pip install 'polyrl[trackers]')")

REWARD = "def digits(prompts, completions, **kw):\n    return [float(len(c) % 3) for c in completions]\n"
STEPS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir) -> tuple[Path, list[dict]]:
    tmp = tmp_path_factory.mktemp("trackers")
    (tmp / "reward.py").write_text(REWARD)
    out = tmp / "run"
    data = {
        "model": {"path": tiny_model_dir},
        "generation": {"group_size": 4, "max_new_tokens": 6},
        "optimizer": {"lr": 1e-5},
        "data": {"task": "arithmetic", "options": {"count": 16}},
        "rewards": [{"function": f"{tmp / 'reward.py'}:digits"}],
        "train": {"steps": STEPS, "prompts_per_step": 2, "threads": 1, "output_dir": str(out)},
        # sampled evaluation: eval/pass@2 is a name MLflow refuses as it is (it dropped the tracker)
        "eval": {"count": 2, "max_new_tokens": 4, "samples": 2, "pass_k": 2},
        "logging": {"report_to": ["tensorboard", "wandb", "mlflow", "trackio"], "completions_per_step": 2,
                    "run_name": "tracked", "project": "polyrl-test"},
    }
    # a fresh interpreter, as a user's run is: trackio fixes its store folder when first imported,
    # and other tests import it in this process (TRL's GRPOTrainer module does)
    code = ("import json, sys\nfrom polyrl.config import RunConfig\nfrom polyrl.trainer import Trainer\n"
            "Trainer(RunConfig.from_dict(json.loads(sys.argv[1]))).run(progress=False)\n")
    fresh_python(code, json.dumps(data), env=environ_without(("WANDB_MODE", "TRACKIO_DIR", "MLFLOW_TRACKING_URI")),
                 timeout=600)
    records = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 1, 2, 2]
    return out, records


def wandb_records(log_file: Path) -> Iterator[tuple[str, Any]]:
    """Each record of an offline W&B run file (what `wandb sync` uploads), with its kind ("run",
    "history", "summary", ...), in the order written."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal.datastore import DataStore

    store = DataStore()
    store.open_for_scan(str(log_file))
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        yield record.WhichOneof("record_type"), record


def wandb_items(items: Any) -> dict[str, Any]:
    """A history, config or summary record's items as a dict (a nested key joined with "/")."""
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def closed_wandb_files(folder: Path) -> list[Path]:
    """The .wandb files of the offline runs under ``folder``, once wandb's service has closed them
    (``wandb.teardown``: finish() returns before the service writes a file's last block)."""
    import wandb

    wandb.teardown()
    return sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))


#: what MLflow and transformers' MLflowCallback read from the environment to choose a run's store,
#: experiment, run and tags
MLFLOW_CHOICES = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TAGS",
                  "MLFLOW_RUN_ID", "MLFLOW_NESTED_RUN")


def mlflow_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """A test's MLflow environment: ``values`` set, the other choices unset, a file store allowed
    (MLflow 3 refuses one without MLFLOW_ALLOW_FILE_STORE)."""
    for key in MLFLOW_CHOICES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    for key, value in values.items():
        monkeypatch.setenv(key, value)


@contextlib.contextmanager
def script_tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's tracking URI set to ``uri`` as a script sets it (a process-wide setting); on the way
    out the script's active run is ended and the URI from before put back."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.end_run()
        mlflow.set_tracking_uri(previous)


#: trackio's variables, which a fresh interpreter of a test leaves out (its store is the run's own)
TRACKIO_CHOICES = ("TRACKIO_DIR", "TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL")


def environ_without(names: tuple[str, ...]) -> dict[str, str]:
    """This process's environment less ``names``, for a fresh interpreter."""
    return {k: v for k, v in os.environ.items() if k not in names}


def fresh_python(code: str, *argv: str, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter with ``argv``, as a user's run or shell is (trackio fixes
    its store folder when first imported, and other tests import it in this process); it must
    succeed, its stderr's end said when it does not."""
    proc = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


#: The columns of the run's completions tables: TRL's (its reward function's name, ``digits``), then polyrl's
TABLE_COLUMNS = ["step", "prompt", "completion", "digits", "advantage", "reward", "finish_reason"]


def table_rows(records: list[dict]) -> list[list]:
    """The records as the trackers' table rows (structures as JSON text, like ``cell``)."""
    from polyrl.tracking.completions import cell

    return [[cell(r[c]) for c in ("step", "prompt", "completion")] + [r["rewards"]["digits"]]
            + [cell(r[c]) for c in ("advantage", "reward", "finish_reason")] for r in records]


def eval_rows(out: Path, phase: str) -> list[list]:
    """The sampled records of the ``phase`` evaluation in ``eval_completions.jsonl`` as the trackers'
    ``eval_completions`` table rows."""
    from polyrl.tracking.completions import EVAL_COLUMNS, table

    records = [json.loads(line) for line in (out / "eval_completions.jsonl").read_text().splitlines()]
    return table([r for r in records if r["phase"] == phase and not r["greedy"]], EVAL_COLUMNS)[1]


@pytest.mark.slow
def test_tensorboard_event_files_hold_scalars_and_completion_text(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, records = run
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert {"reward_mean", "loss", "lr", "reward/digits/mean"} <= set(acc.Tags()["scalars"])
    lr = acc.Scalars("lr")
    assert [e.step for e in lr] == [1, 2] and all(e.value == pytest.approx(1e-5) for e in lr)
    text = acc.Tensors("completions")
    assert [t.step for t in text] == [1, 2]
    first = text[0].tensor_proto.string_val[0].decode()
    assert first.startswith("| step | prompt | completion | digits | advantage | reward | finish\\_reason |")
    assert len(first.strip().splitlines()) == 2 + 2  # header, rule, two records
    assert records[0]["finish_reason"] in first
    # evaluations outside a step's line reach the tracker too, at their metrics.jsonl lines' steps
    # and under their names: before training at 0, after the last step at that step
    evals = [line for line in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "phase" in line]
    assert [(line["phase"], line["step"]) for line in evals] == [("before", 0), ("after", STEPS)]
    accuracy = acc.Scalars("eval/accuracy")
    assert [e.step for e in accuracy] == [0, STEPS]
    assert [e.value for e in accuracy] == pytest.approx([line["eval/accuracy"] for line in evals])
    assert not any(tag.startswith("eval_") for tag in acc.Tags()["scalars"])
    # each evaluation's sampled completions, a table of their own at its step
    tables = acc.Tensors("eval_completions")
    assert [t.step for t in tables] == [0, STEPS]
    before = tables[0].tensor_proto.string_val[0].decode().strip().splitlines()
    assert before[0].replace("\\_", "_").startswith("| phase | after_steps |") and len(before) == 2 + len(eval_rows(out, "before")) == 6


def test_wandb_offline_run_holds_history_and_completion_tables(run):
    out, records = run
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    (log_file,) = run_dir.glob("run-*.wandb")  # what `wandb sync` uploads
    history = [wandb_items(record.history.item) for kind, record in wandb_records(log_file) if kind == "history"]
    assert [h["_step"] for h in history] == [0, 1, 2]  # the evaluation before training, then the steps
    assert set(history[0]) >= {"eval/accuracy", "eval/pass@2"} and "lr" not in history[0]
    steps = history[1:]
    assert all(h["lr"] == 1e-5 and "reward_mean" in h for h in steps)
    assert all(h["completions/_type"] == "table-file" and h["completions/nrows"] == 2 for h in steps)
    assert "eval/accuracy" in steps[-1]  # the evaluation after training, at the last step
    table = json.loads((run_dir / "files" / steps[0]["completions/path"]).read_text())
    assert table["columns"] == TABLE_COLUMNS  # TRL's names: its reward function's column, not polyrl's "rewards"
    assert table["data"] == table_rows(records[:2])
    # each evaluation's sampled completions, a table of their own at its step
    assert [h["_step"] for h in history if "eval_completions/path" in h] == [0, STEPS]
    for phase, entry in (("before", history[0]), ("after", history[-1])):
        evaluated = json.loads((run_dir / "files" / entry["eval_completions/path"]).read_text())
        assert evaluated["data"] == eval_rows(out, phase) and len(evaluated["data"]) == 4


def test_mlflow_store_holds_metrics_params_and_completion_artifacts(run):
    from mlflow.tracking import MlflowClient

    out, records = run
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("polyrl-test")
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "tracked" and found.info.status == "FINISHED"
    assert found.data.params["optimizer.lr"] == "1e-05"
    history = client.get_metric_history(found.info.run_id, "lr")
    assert [(m.step, m.value) for m in history] == [(1, 1e-5), (2, 1e-5)]
    assert [m.step for m in client.get_metric_history(found.info.run_id, "reward/digits/mean")] == [1, 2]
    # TRL's names too, but its "reward" would be a file where reward/... needs a folder: left out
    assert [m.step for m in client.get_metric_history(found.info.run_id, "rewards/digits/mean")] == [1, 2]
    assert [m.step for m in client.get_metric_history(found.info.run_id, "reward_mean")] == [1, 2]
    assert "reward" not in found.data.metrics
    # eval/pass@2 under a name MLflow takes, before training and after the last step
    assert sorted(m.step for m in client.get_metric_history(found.info.run_id, "eval/pass_at_2")) == [0, STEPS]
    names = sorted(a.path for a in client.list_artifacts(found.info.run_id, "completions"))
    assert names == ["completions/step_000001.json", "completions/step_000002.json"]
    local = client.download_artifacts(found.info.run_id, "completions/step_000002.json", str(out / "dl"))
    table = json.loads(Path(local).read_text())
    assert table["columns"] == TABLE_COLUMNS and table["data"] == table_rows(records[2:])
    names = sorted(a.path for a in client.list_artifacts(found.info.run_id, "eval_completions"))
    assert names == ["eval_completions/step_000000.json", f"eval_completions/step_{STEPS:06d}.json"]
    local = client.download_artifacts(found.info.run_id, names[0], str(out / "dl"))
    assert json.loads(Path(local).read_text())["data"] == eval_rows(out, "before")


def test_trackio_store_holds_metrics_and_completion_tables(run):
    out, records = run
    code = (
        "import json, sys\n"
        "from trackio.sqlite_storage import SQLiteStorage\n"
        "print(json.dumps([SQLiteStorage.get_runs('polyrl-test'), SQLiteStorage.get_logs('polyrl-test', 'tracked')],"
        " default=str))\n"
    )
    # trackio fixes its store folder at import (TRACKIO_DIR): read it from a fresh interpreter
    proc = fresh_python(code, env={**os.environ, "TRACKIO_DIR": str(out / "trackio")}, timeout=120)
    runs, logs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs == ["tracked"]
    scalars = [entry for entry in logs if "lr" in entry]
    assert [(e["step"], e["lr"]) for e in scalars] == [(1, 1e-5), (2, 1e-5)]
    tables = [entry for entry in logs if "completions" in entry]
    assert [e["step"] for e in tables] == [1, 2]
    assert "_type" in json.dumps(tables[0]["completions"]) and records[0]["finish_reason"] in json.dumps(tables[0])
    evaluated = [entry for entry in logs if "eval_completions" in entry]
    assert [e["step"] for e in evaluated] == [0, STEPS] and "_type" in json.dumps(evaluated[0]["eval_completions"])


def test_a_metric_named_as_another_ones_folder_is_left_out_not_the_tracker(tmp_path, monkeypatch):
    """MLflow's file store keeps a metric as a file named by it: TRL's ``reward`` beside polyrl's
    ``reward/<f>/mean`` raised "Is a directory" and dropped the tracker at the first step."""
    from mlflow.tracking import MlflowClient

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext

    mlflow_env(monkeypatch)
    tracker = MlflowTracker(TrackerContext(tmp_path, "nested", "polyrl-nested", {}))
    tracker.log_metrics({"reward/f/mean": 0.5, "reward": 1.0, "loss": 0.1}, 0)
    tracker.log_metrics({"reward": 2.0, "reward/f/mean": 0.7, "reward/f": 3.0, "loss": 0.2}, 1)
    tracker.close()
    client = MlflowClient(tracking_uri=tracker.uri)
    metrics = client.get_run(tracker.run_id).data.metrics
    assert metrics == {"reward/f/mean": 0.7, "loss": 0.2}  # reward/f is a folder of reward/f/mean too


def test_two_rewards_whose_names_mlflow_reads_alike_both_keep_their_curves(tmp_path, monkeypatch):
    """Once: rewards labelled ``judge (gpt)`` and ``judge [gpt]`` are both ``reward/judge _gpt_/...``
    in MLflow (it refuses brackets), and every metric of the second was left out (one warning line):
    its curves were missing from the MLflow UI. Now the second reward's metrics, all of them, are
    under ``reward/judge _gpt__2/``."""
    from mlflow.tracking import MlflowClient

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext

    mlflow_env(monkeypatch)
    tracker = MlflowTracker(TrackerContext(tmp_path, "alike", "polyrl-alike", {}))
    for step in (1, 2):
        tracker.log_metrics({"reward/judge (gpt)/mean": 0.1 * step, "reward/judge [gpt]/mean": 0.5 * step,
                             "reward/judge [gpt]/cache_hits": 3.0 * step}, step)
    tracker.close()
    client = MlflowClient(tracking_uri=tracker.uri)
    metrics = client.get_run(tracker.run_id).data.metrics
    assert metrics == {"reward/judge _gpt_/mean": 0.2, "reward/judge _gpt__2/mean": 1.0,
                       "reward/judge _gpt__2/cache_hits": 6.0}
    assert [m.step for m in client.get_metric_history(tracker.run_id, "reward/judge _gpt__2/mean")] == [1, 2]


@pytest.mark.parametrize("experiment", [None, "grpo-sweep"])
def test_a_trl_runs_mlflow_experiment_name_and_tags_are_transformers_mlflowcallbacks(tmp_path, monkeypatch,
                                                                                     tiny_model_dir, experiment):
    """transformers' MLflowCallback opens a TRL run in $MLFLOW_EXPERIMENT_NAME (MLflow's "Default"
    experiment when unset), named args.run_name (unset: MLflow names it) and tagged with $MLFLOW_TAGS.
    polyrl put a TRL script's run in experiment "polyrl", named after its output_dir, without the tags:
    the user's MLflow UI, opened on their experiment, did not list it. Now both land alike (transformers'
    own callback run here against the same local file store)."""
    pytest.importorskip("polyrl_torch")
    trl = pytest.importorskip("trl")
    integration = pytest.importorskip("transformers.integrations.integration_utils")
    from mlflow.tracking import MlflowClient
    from transformers import TrainerControl, TrainerState

    from polyrl.trl import GRPOTrainer

    uri = (tmp_path / "mlruns").as_uri()
    mlflow_env(monkeypatch, MLFLOW_TRACKING_URI=uri, MLFLOW_TAGS='{"release": "rc1", "attempt": 2}',
               **({} if experiment is None else {"MLFLOW_EXPERIMENT_NAME": experiment}))
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="mlflow", max_steps=1,
                          num_generations=2, per_device_train_batch_size=2, max_completion_length=4, disable_tqdm=True,
                          logging_steps=1)  # the step logged (TRL's 10 would leave it to the end summary)
    rows = [{"prompt": "What is 1 + 1?"}] * 2
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                train_dataset=rows, args=args).train()
    theirs = integration.MLflowCallback()
    state = TrainerState(is_world_process_zero=True)
    from types import SimpleNamespace

    from polyrl.trl_run import model_config  # the folder's config as TRL's trainer holds it (float32)
    theirs.setup(args, state, SimpleNamespace(config=model_config(args, None, tiny_model_dir, "float32")))
    their_id = theirs._ml_flow.active_run().info.run_id
    theirs.on_train_end(args, state, TrainerControl())

    client = MlflowClient(tracking_uri=uri)
    (our_run,) = [run for e in client.search_experiments() for run in client.search_runs([e.experiment_id])
                  if run.info.run_id != their_id]
    their_params = client.get_run(their_id).data.params  # args.to_dict() over the model config, as logged
    assert {k: v for k, v in our_run.data.params.items() if not k.startswith("polyrl.")} == their_params
    their_run = client.get_run(their_id)
    names = [client.get_experiment(run.info.experiment_id).name for run in (their_run, our_run)]
    assert names == [experiment or "Default"] * 2
    assert {k: v for k, v in our_run.data.tags.items() if not k.startswith("mlflow.")} == \
        {k: v for k, v in their_run.data.tags.items() if not k.startswith("mlflow.")} == {"release": "rc1", "attempt": "2"}
    assert our_run.info.run_name != "out" and "train/loss" in our_run.data.metrics  # MLflow's own name, as theirs


def test_an_mlflow_tags_variable_that_is_not_json_is_one_error_naming_it(tmp_path, monkeypatch):
    """$MLFLOW_TAGS that is no JSON object: a ValueError naming it when the tracker opens (before
    any step; the run's error names the tracker), not tags read wrong."""
    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext, TrlRun

    mlflow_env(monkeypatch, MLFLOW_TRACKING_URI=(tmp_path / "mlruns").as_uri())
    for bad in ("release=rc1", '["rc1"]'):
        monkeypatch.setenv("MLFLOW_TAGS", bad)
        with pytest.raises(ValueError, match="MLFLOW_TAGS is not a JSON object"):
            MlflowTracker(TrackerContext(tmp_path, "out", "polyrl", {}, trl=True, trl_run=TrlRun()))


def test_a_database_store_keeps_trls_reward_beside_the_per_reward_metrics(tmp_path, monkeypatch):
    """Only MLflow's file store cannot hold ``reward`` beside ``reward/<f>/mean`` (a metric is a file
    there); a database store holds both, and TRL's ``reward`` was left out of it all the same.
    Needs MLflow's database extras (SQLAlchemy, alembic), which mlflow-skinny leaves out."""
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("alembic")
    from mlflow.tracking import MlflowClient

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker = MlflowTracker(TrackerContext(tmp_path, "nested", "polyrl-nested", {}))
    assert not tracker.file_store
    tracker.log_metrics({"reward/f/mean": 0.5, "reward": 1.0, "loss": 0.1}, 1)
    tracker.log_metrics({"reward": 2.0, "reward/f/mean": 0.7, "reward/f": 3.0, "loss": 0.2}, 2)
    tracker.close()
    client = MlflowClient(tracking_uri=tracker.uri)
    assert client.get_run(tracker.run_id).data.metrics == {"reward/f/mean": 0.7, "reward": 2.0, "reward/f": 3.0,
                                                           "loss": 0.2}
    assert [(m.step, m.value) for m in client.get_metric_history(tracker.run_id, "reward")] == [(1, 1.0), (2, 2.0)]


@pytest.mark.slow
def test_a_run_that_fails_finishes_its_mlflow_run_as_failed(tmp_path, tiny_model_dir):
    """Trackers were always closed as a success: a run stopped by its reward's error showed in
    MLflow as FINISHED (and in W&B with exit code 0), so a sweep's "finished" filter kept it."""
    from mlflow.tracking import MlflowClient

    (tmp_path / "reward.py").write_text(
        "def boom(prompts, completions, trainer_state, **kw):\n"
        "    if trainer_state.global_step >= 1:\n"
        "        raise RuntimeError('the judge is down')\n"
        "    return [1.0] * len(completions)\n")
    out = tmp_path / "run"
    data = {"model": {"path": tiny_model_dir}, "generation": {"group_size": 2, "max_new_tokens": 4},
            "data": {"task": "arithmetic", "options": {"count": 8}},
            "rewards": [{"function": f"{tmp_path / 'reward.py'}:boom"}],
            "train": {"steps": 3, "prompts_per_step": 2, "threads": 1, "output_dir": str(out)},
            "logging": {"report_to": ["mlflow"], "run_name": "doomed", "project": "polyrl-fail"}}
    env = environ_without(("MLFLOW_TRACKING_URI",))
    code = ("import json, sys\nfrom polyrl.config import RunConfig\nfrom polyrl.trainer import Trainer\n"
            "Trainer(RunConfig.from_dict(json.loads(sys.argv[1]))).run(progress=False)\n")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(data)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode != 0 and "the judge is down" in done.stderr
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("polyrl-fail").experiment_id])
    assert found.info.run_name == "doomed" and found.info.status == "FAILED"
    assert [m.step for m in client.get_metric_history(found.info.run_id, "loss")] == [1]


def test_a_resumed_run_is_a_tracker_run_named_apart(toy, tmp_path):
    """A --resume opened a second MLflow (W&B, trackio) run under the same name as the one it
    continues, so the crashed and the resumed branch could not be told apart in the run list."""
    import attrs
    from mlflow.tracking import MlflowClient

    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    config = RunConfig.from_dict({
        "model": {"path": "toy-model"}, "backends": {"train": "toy"}, "generation": {"group_size": 2},
        "data": {"task": "arithmetic", "options": {"count": 16}}, "rewards": [{"name": "toy_sevens"}],
        "train": {"steps": 2, "prompts_per_step": 2, "checkpoint_every": 1, "output_dir": str(tmp_path / "run")},
        "logging": {"report_to": ["mlflow"], "project": "polyrl-resume"}})
    Trainer(config).run(progress=False)
    trainer = Trainer(attrs.evolve(config, train=attrs.evolve(config.train, steps=3)))
    assert trainer.resume()
    trainer.run(progress=False)
    client = MlflowClient(tracking_uri=(tmp_path / "run" / "mlruns").resolve().as_uri())
    runs = client.search_runs([client.get_experiment_by_name("polyrl-resume").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["run", "run-resumed-at-step-2"]


@pytest.mark.parametrize("trackio_dir", [None, "elsewhere"])
def test_trackio_and_tensorboard_say_where_they_write_and_how_to_look(tmp_path, trackio_dir):
    """trackio's start said nothing of polyrl's choice of folder: its own banner says `trackio show
    --project P`, which in another shell (no TRACKIO_DIR) opens trackio's default store under the
    HF cache, not this run's, and it says nothing for a second run of a project in one process.
    The start now names the store, TRACKIO_DIR's when set, and the command that shows it."""
    out = tmp_path / "run"
    env = environ_without(TRACKIO_CHOICES)
    if trackio_dir:
        env["TRACKIO_DIR"] = str(tmp_path / trackio_dir)
    code = ("import sys\nfrom pathlib import Path\nfrom polyrl.tracking.spec import TrackerContext\n"
            "from polyrl.tracking.tensorboard import TensorBoardTracker\nfrom polyrl.tracking.trackio import TrackioTracker\n"
            "for make in (TrackioTracker, TensorBoardTracker):\n"
            "    make(TrackerContext(Path(sys.argv[1]), 'r', 'my project', {})).close()\n")
    proc = fresh_python(code, str(out), env=env)
    store = tmp_path / trackio_dir if trackio_dir else (out / "trackio").resolve()
    assert f"TRACKIO_DIR={store} trackio show --project 'my project'" in proc.stderr, proc.stderr
    assert f"tensorboard --logdir {out / 'tensorboard'}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("blocked", ["a file in its place", "a read-only folder"])
def test_a_trackio_store_that_cannot_be_written_is_one_error_at_start(tmp_path, blocked):
    """trackio writes from a thread of its own: a store it could not write (a file where its folder
    goes, a read-only folder) started the run as tracked, and each step's metrics were lost with
    one UserWarning of trackio's own at the end, the run ending 0 as if tracked, where TensorBoard,
    W&B and MLflow refuse such a folder at start. Now it is the same one error at start."""
    store = tmp_path / "store"
    if blocked == "a file in its place":
        store.write_text("not a folder")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        store.mkdir()
        store.chmod(0o555)
    code = ("import sys\nfrom pathlib import Path\nfrom polyrl.errors import ConfigError\n"
            "from polyrl.registry import get_registry\nfrom polyrl.tracking.session import RunTracking\n"
            "spec = get_registry().trackers_by_name()['trackio']\n"
            "t = RunTracking(specs=[spec], output_dir=Path(sys.argv[1]), completions_per_step=0, run_name='r',\n"
            "                project='p', config={})\n"
            "try:\n    t.open()\nexcept ConfigError as exc:\n    print('refused:', exc)\n"
            "else:\n    t.publish({'step': 1, 'loss': 0.5})\n    t.close()\n    print('opened')\n")
    proc = fresh_python(code, str(tmp_path / "run"), env={**environ_without(TRACKIO_CHOICES), "TRACKIO_DIR": str(store)})
    out = proc.stdout.strip().splitlines()[-1]
    assert out.startswith("refused: logging.report_to: tracker 'trackio' failed to start"), proc.stdout + proc.stderr
    assert str(store) in out and "Traceback" not in proc.stderr


def test_a_trl_runs_wandb_offline_run_has_transformers_step_axis_and_summary(tmp_path, monkeypatch):
    """The real wandb library under a TRL script's run (``TrackerContext.trl``): the run file holds
    transformers' step axis (train/global_step, every metric's step_metric with step_sync), each
    history row's train/global_step, and the end-of-training numbers in the summary, not the history.
    The calls themselves are compared with transformers' WandbCallback in test_trl_tags."""
    import functools

    from polyrl.tracking import TrackerSpec
    from polyrl.tracking.session import RunTracking
    from polyrl.tracking.wandb import WandbTracker
    from polyrl.trl_tags import trl_tags

    for name in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    tracking = RunTracking(specs=[TrackerSpec("wandb", create=WandbTracker)], output_dir=tmp_path, step_scale=2,
                           completions_per_step=0, run_name="r", project="polyrl", config={}, trl=True,
                           rename=functools.partial(trl_tags, names=None))
    tracking.open()
    tracking.publish({"step": 1, "loss": 0.25, "epoch": 0.5})
    tracking.publish_at({"train_runtime": 3.5, "train_loss": 0.25, "epoch": 0.5}, step=1)
    tracking.close()
    assert not tracking.dropped
    # run.finish() returns once the service has the exit record, but the service writes the
    # file's last block only when it closes the run's stream, after finish() returned (at exit,
    # wandb's atexit teardown waits for it: a user's run loses nothing). This process reads the file
    # now, so it waits for the same: teardown returns once the service closed every stream and ended.
    (log_file,) = closed_wandb_files(tmp_path)
    history, metrics, summary, project = [], [], {}, None
    for kind, record in wandb_records(log_file):
        if kind == "history":
            history.append(wandb_items(record.history.item))
        elif kind == "metric":
            metrics.append((record.metric.name or record.metric.glob_name, record.metric.step_metric,
                            record.metric.options.step_sync))
        elif kind == "summary":
            summary.update({i.key: json.loads(i.value_json) for i in record.summary.update})
        elif kind == "run":
            project = record.run.project
    assert project == "huggingface"
    assert ("train/global_step", "", False) in metrics and ("*", "train/global_step", True) in metrics
    assert [(h["train/global_step"], h.get("train/loss")) for h in history] == [(2, 0.25)]
    assert history[0]["train/epoch"] == 0.5 and "train/train_loss" not in history[0]
    assert summary["train_runtime"] == 3.5 and summary["train_loss"] == 0.25


@pytest.mark.parametrize("flatten", ["", "true"])
def test_a_trl_runs_mlflow_params_are_transformers_mlflowcallbacks(tmp_path, monkeypatch, flatten):
    """transformers' MLflowCallback logs args.to_dict() over the model config as the run's params
    (flattened under $MLFLOW_FLATTEN_PARAMS, values as str, a value longer than MLflow takes left
    out, the first $MLFLOW_MAX_LOG_PARAMS only); polyrl logged its own config under polyrl's names
    (JSON values) instead. Both written to one local store and read back: TRL's params equal,
    polyrl's own config beside them under polyrl."""
    integration = pytest.importorskip("transformers.integrations.integration_utils")
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient
    from transformers import TrainerControl, TrainerState

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext, TrlRun

    uri = (tmp_path / "mlruns").as_uri()
    mlflow_env(monkeypatch, MLFLOW_TRACKING_URI=uri, MLFLOW_FLATTEN_PARAMS=flatten, MLFLOW_MAX_LOG_PARAMS="7",
               MLFLOW_EXPERIMENT_NAME="params")  # named: MLflow's fluent API keeps the last id
    model_config = {"hidden_size": 64, "id2label": {"0": "A", "1": "B"}, "use_cache": True, "note": "m" * 7000,
                    "empty": {}}
    args_dict = {"learning_rate": 1e-6, "run_name": None, "hidden_size": 32, "report_to": ["mlflow"],
                 "lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "beta": 0.0, "seed": 42}
    args = SimpleNamespace(to_dict=lambda: dict(args_dict), run_name=None)
    model = SimpleNamespace(config=SimpleNamespace(to_dict=lambda: dict(model_config)))
    theirs = integration.MLflowCallback()
    state = TrainerState(is_world_process_zero=True)
    theirs.setup(args, state, model)
    their_id = theirs._ml_flow.active_run().info.run_id
    theirs.on_train_end(args, state, TrainerControl())
    ours = MlflowTracker(TrackerContext(tmp_path, "out", "polyrl", {"algorithm": {"beta": 0.0}}, trl=True,
                                        trl_run=TrlRun(params={**model_config, **args_dict})))
    ours.close()
    client = MlflowClient(tracking_uri=uri)
    their_params = client.get_run(their_id).data.params
    our_params = client.get_run(ours.run_id).data.params
    assert len(their_params) == 7 and "note" not in their_params
    assert {k: v for k, v in our_params.items() if not k.startswith("polyrl.")} == their_params
    assert our_params["polyrl.algorithm.beta"] == "0.0"


def test_a_trl_run_reattaches_to_mlflow_run_id(tmp_path, monkeypatch):
    """$MLFLOW_RUN_ID: transformers' MLflowCallback resumes that run (start_run(run_id)), as a
    resumed training wants; polyrl opened a new run."""
    from mlflow.tracking import MlflowClient

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext, TrlRun

    uri = (tmp_path / "mlruns").as_uri()
    mlflow_env(monkeypatch, MLFLOW_TRACKING_URI=uri)
    context = TrackerContext(tmp_path, "out", "polyrl", {}, trl=True, trl_run=TrlRun(params={"seed": 42}))
    first = MlflowTracker(context)
    first.log_metrics({"loss": 1.0}, 1)
    first.close()
    monkeypatch.setenv("MLFLOW_RUN_ID", first.run_id)
    again = MlflowTracker(context)
    again.log_metrics({"loss": 0.5}, 2)
    assert again.run_id == first.run_id
    run = MlflowClient(tracking_uri=uri).get_run(first.run_id)
    assert run.info.status == "RUNNING" and run.data.params["seed"] == "42"
    again.close()


def _wandb_config(folder: Path) -> dict:
    """The config an offline W&B run wrote (the run record's, then later config records), read
    once wandb's service has closed every run's file."""
    (log_file,) = closed_wandb_files(folder)
    config: dict = {}
    for kind, record in wandb_records(log_file):
        items = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        config.update(wandb_items(items))
    config.pop("_wandb", None)
    return config


def test_a_trl_lora_runs_wandb_config_has_transformers_peft_config_and_adapter_count(tmp_path, monkeypatch,
                                                                                     tiny_model_dir):
    """transformers' WandbCallback logs a PeftModel's peft_config ({"default": LoraConfig}) first in
    the run's config and counts the adapters in model/num_parameters; polyrl's W&B run of a TRL
    script with peft_config had neither. Both written offline by the real wandb and read back:
    equal (polyrl's own config beside them under polyrl)."""
    peft = pytest.importorskip("peft")
    trl = pytest.importorskip("trl")
    integration = pytest.importorskip("transformers.integrations.integration_utils")
    import copy

    from transformers import AutoModelForCausalLM, TrainerState

    from polyrl.tracking import TrackerSpec
    from polyrl.tracking.session import RunTracking
    from polyrl.tracking.wandb import WandbTracker
    from polyrl.trl_run import trl_run

    for name in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_WATCH", "WANDB_LOG_MODEL"):
        monkeypatch.delenv(name, raising=False)
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, report_to="none", bf16=False)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")

    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), copy.deepcopy(lora))
    model.config.use_cache = args.use_cache  # as transformers' Trainer sets it
    (tmp_path / "theirs").mkdir()
    theirs = integration.WandbCallback()
    # the run opened here offline (wandb's settings of this process may predate WANDB_MODE); the
    # callback configures a run already open as its own ("run may have been created manually")
    theirs._wandb.init(project="huggingface", dir=str(tmp_path / "theirs"), mode="offline")
    theirs.setup(args, TrainerState(is_world_process_zero=True), model)
    theirs._wandb.finish()

    run = trl_run(args, None, tiny_model_dir, "float32", lora)  # TRL's peft_config
    tracking = RunTracking(specs=[TrackerSpec("wandb", create=WandbTracker)], output_dir=tmp_path / "ours",
                           completions_per_step=0, run_name=None, project="polyrl", config={"lr": 1.0}, trl=True,
                           trl_run=run)
    tracking.open()
    tracking.close()
    assert not tracking.dropped
    their_config, our_config = _wandb_config(tmp_path / "theirs"), _wandb_config(tmp_path / "ours")
    assert their_config["peft_config"]["default"]["r"] == 4 and their_config["model/num_parameters"] > 0
    assert our_config.pop("polyrl") == {"lr": 1.0}
    assert our_config == their_config
    assert list(run.config)[0] == "peft_config" and "peft_config" not in run.params  # MLflow logs none


def test_a_trl_runs_mlflow_run_nests_under_the_scripts_active_run_with_mlflow_nested_run(tmp_path, monkeypatch):
    """$MLFLOW_NESTED_RUN: transformers' MLflowCallback opens its run nested under the run the script
    has active (start_run(nested=True): tag mlflow.parentRunId); polyrl opened a top-level run."""
    trl = pytest.importorskip("trl")
    integration = pytest.importorskip("transformers.integrations.integration_utils")
    import mlflow
    from mlflow.tracking import MlflowClient
    from transformers import TrainerState

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext
    from polyrl.trl_run import trl_run

    uri = (tmp_path / "mlruns").as_uri()
    mlflow_env(monkeypatch, MLFLOW_TRACKING_URI=uri, MLFLOW_NESTED_RUN="true", MLFLOW_EXPERIMENT_NAME="nested")
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, report_to="none", bf16=False)
    client = MlflowClient(tracking_uri=uri)
    with script_tracking_uri(uri):
        parent = mlflow.start_run(experiment_id=client.create_experiment("script")).info.run_id
        theirs = integration.MLflowCallback()
        theirs.setup(args, TrainerState(is_world_process_zero=True), None)
        their_id = theirs._ml_flow.active_run().info.run_id
        theirs._ml_flow.end_run()  # their nested run; the script's stays active
        run = trl_run(args, None, str(tmp_path / "no-model"), "float32", None)  # read in the script's thread
    ours = MlflowTracker(TrackerContext(tmp_path, "out", "polyrl", {}, trl=True, trl_run=run))
    ours.close()
    their_tags, our_tags = client.get_run(their_id).data.tags, client.get_run(ours.run_id).data.tags
    assert their_tags["mlflow.parentRunId"] == parent and their_id != parent
    assert our_tags.get("mlflow.parentRunId") == parent


@pytest.mark.parametrize("variable, value, said", [
    ("WANDB_LOG_MODEL", "checkpoint", "uploads each checkpoint"),
    ("WANDB_WATCH", "gradients", "calls wandb.watch"),
])
def test_wandb_variables_polyrl_does_not_act_on_are_one_warning_naming_them(tmp_path, monkeypatch, variable, value,
                                                                            said):
    """transformers' WandbCallback uploads the model as an artifact under $WANDB_LOG_MODEL and calls
    wandb.watch under $WANDB_WATCH; polyrl does neither, and said nothing. Now one warning names the
    variable, what transformers does and what to do; unset (or "false"), nothing is said. (With
    "checkpoint" the trained model is logged at the end, as with "end".)"""
    from structlog.testing import capture_logs

    from polyrl.tracking.spec import TrackerContext
    from polyrl.tracking.wandb import WandbTracker

    for name in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_LOG_MODEL", "WANDB_WATCH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_WATCH", "false")
    monkeypatch.setenv(variable, value)
    (tmp_path / "model").mkdir()  # the trained model WANDB_LOG_MODEL logs
    (tmp_path / "model" / "config.json").write_text("{}")
    with capture_logs() as logs:
        WandbTracker(TrackerContext(tmp_path, "r", "p", {}, trl=True)).close()
    warned = [e for e in logs if e["log_level"] == "warning" and variable in e["event"]]
    assert len(warned) == 1 and warned[0]["event"].startswith(f"{variable}={value}: ") and said in warned[0]["event"]
    assert variable in warned[0]["fix"]
    monkeypatch.setenv(variable, "false")
    with capture_logs() as logs:
        WandbTracker(TrackerContext(tmp_path, "r", "p", {}, trl=True)).close()
    assert not [e for e in logs if e["log_level"] == "warning" and "WANDB_" in e["event"]]


def test_a_trl_runs_mlflow_metrics_go_into_the_scripts_active_run(tmp_path, monkeypatch):
    """Without $MLFLOW_NESTED_RUN and $MLFLOW_RUN_ID, transformers' MLflowCallback starts no run when
    the script has one active: it logs its params and $MLFLOW_TAGS into that run and leaves it open
    for the script to end. polyrl opened a second, top-level run. The active run is read in the
    script's thread (MLflow keeps it per thread), at the tracking URI the script set."""
    trl = pytest.importorskip("trl")
    integration = pytest.importorskip("transformers.integrations.integration_utils")
    import mlflow
    from mlflow.tracking import MlflowClient
    from transformers import TrainerState

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext
    from polyrl.trl_run import trl_run

    uri = (tmp_path / "mlruns").as_uri()
    mlflow_env(monkeypatch, MLFLOW_TAGS='{"release": "rc1"}')
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, report_to="none", bf16=False)
    client = MlflowClient(tracking_uri=uri)
    with script_tracking_uri(uri):  # the script's store; polyrl's own default would be output_dir/mlruns
        theirs_id = mlflow.start_run(experiment_id=client.create_experiment("theirs")).info.run_id
        theirs = integration.MLflowCallback()
        theirs.setup(args, TrainerState(is_world_process_zero=True), None)
        assert theirs._ml_flow.active_run().info.run_id == theirs_id and not theirs._auto_end_run
        mlflow.end_run()
        ours_id = mlflow.start_run(experiment_id=client.create_experiment("ours")).info.run_id
        run = trl_run(args, None, str(tmp_path / "no-model"), "float32", None)  # read in the script's thread
        ours = MlflowTracker(TrackerContext(tmp_path / "out", "out", "polyrl", {"lr": 1.0}, trl=True, trl_run=run))
        ours.log_metrics({"loss": 0.5}, 1)
        ours.close()
        assert client.get_run(ours_id).info.status == "RUNNING"  # the script's to end
    assert ours.run_id == ours_id and not (tmp_path / "out" / "mlruns").exists()
    ours_experiment = client.get_experiment_by_name("ours").experiment_id
    assert [r.info.run_id for r in client.search_runs([ours_experiment])] == [ours_id]
    their_run, our_run = client.get_run(theirs_id), client.get_run(ours_id)
    assert our_run.data.tags["release"] == their_run.data.tags["release"] == "rc1"
    assert {k: v for k, v in our_run.data.params.items() if not k.startswith("polyrl.")} == their_run.data.params
    assert our_run.data.metrics["loss"] == 0.5


def test_a_trl_runs_mlflow_run_goes_to_the_tracking_uri_the_script_set(tmp_path, monkeypatch):
    """A script that points MLflow at its store (``mlflow.set_tracking_uri``, no run active, no
    $MLFLOW_TRACKING_URI of its own): transformers' MLflowCallback opens its run there, and so does
    polyrl, never in its default store under output_dir, where the script's MLflow UI never looks
    (MLflow's set_tracking_uri also sets $MLFLOW_TRACKING_URI, which polyrl reads)."""
    trl = pytest.importorskip("trl")
    integration = pytest.importorskip("transformers.integrations.integration_utils")
    import mlflow
    from mlflow.tracking import MlflowClient
    from transformers import TrainerState

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext
    from polyrl.trl_run import trl_run

    uri = (tmp_path / "script-store").as_uri()
    # the experiment by name (MLflow's fluent API keeps the last experiment id process-wide)
    mlflow_env(monkeypatch, MLFLOW_EXPERIMENT_NAME="script")
    args = trl.GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, report_to="none", bf16=False)
    with script_tracking_uri(uri):
        assert mlflow.active_run() is None
        theirs = integration.MLflowCallback()
        theirs.setup(args, TrainerState(is_world_process_zero=True), None)
        theirs_id = theirs._ml_flow.active_run().info.run_id
        mlflow.end_run()
        run = trl_run(args, None, str(tmp_path / "no-model"), "float32", None)  # read in the script's thread
        ours = MlflowTracker(TrackerContext(tmp_path / "out", "out", "polyrl", {"lr": 1.0}, trl=True, trl_run=run))
        ours.log_metrics({"loss": 0.5}, 1)
        ours.close()
    assert not (tmp_path / "out" / "mlruns").exists()
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(theirs_id).info.run_id == theirs_id  # the callback's run is in the script's store
    our_run = client.get_run(ours.run_id)
    assert our_run.info.experiment_id == client.get_run(theirs_id).info.experiment_id
    assert our_run.data.metrics["loss"] == 0.5


def _wandb_artifacts(folder: Path) -> list:
    """The artifact records an offline W&B run wrote, read once wandb's service closed its file."""
    (log_file,) = closed_wandb_files(folder)
    return [record.artifact for kind, record in wandb_records(log_file) if kind == "artifact"]


def test_wandb_log_model_end_logs_the_trained_model_as_transformers_artifact(tmp_path, monkeypatch):
    """$WANDB_LOG_MODEL=end: transformers' WandbCallback logs the trained model at the end of training
    as a W&B artifact (type model, alias final_model, named model-<run name>, metadata final_model and
    the summary's numbers); polyrl only warned. Written offline by the real wandb, read back from the
    run's .wandb file."""
    from polyrl.tracking.spec import TrackerContext, TrlRun
    from polyrl.tracking.wandb import WandbTracker

    for name in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_WATCH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_LOG_MODEL", "end")
    model = tmp_path / "model"  # as the trainer exports it before the trackers close
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"weights")
    tracker = WandbTracker(TrackerContext(tmp_path, "r", "p", {}, trl=True, trl_run=TrlRun(run_name="mine")))
    tracker.log_metrics({"train/train_loss": 0.25, "train/loss": 1.0}, 3)
    tracker.close()
    (artifact,) = _wandb_artifacts(tmp_path)
    assert (artifact.name, artifact.type) == ("model-mine", "model") and "final_model" in artifact.aliases
    assert json.loads(artifact.metadata) == {"train_loss": 0.25, "final_model": True}
    assert sorted(entry.path for entry in artifact.manifest.contents) == ["config.json", "model.safetensors"]


def test_wandb_log_model_with_a_run_name_w_and_b_refuses_in_a_name_still_logs_and_finishes(tmp_path, monkeypatch):
    """A run named "qwen 0.5b/grpo" (a space, a slash: characters W&B refuses in an artifact's
    name). Before: wandb.Artifact raised ValueError in close(), so the model was not logged and
    run.finish() never ran. Now the name's refused characters are dashes; and an artifact that
    fails anyway still finishes the run."""
    import wandb

    from polyrl.tracking.spec import TrackerContext, TrlRun
    from polyrl.tracking.wandb import WandbTracker

    for name in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_WATCH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_LOG_MODEL", "end")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "llama"}')
    context = TrackerContext(tmp_path, "r", "p", {}, trl=True, trl_run=TrlRun(run_name="qwen 0.5b/grpo"))
    tracker = WandbTracker(context)
    tracker.close()
    assert wandb.run is None  # finished
    (artifact,) = _wandb_artifacts(tmp_path)
    assert (artifact.name, artifact.type) == ("model-qwen-0.5b-grpo", "model")

    def fails() -> None:
        raise OSError("disk full")

    again = WandbTracker(TrackerContext(tmp_path / "again", "r", "p", {}, trl=True))
    monkeypatch.setattr(again, "_log_final_model", fails)
    with pytest.raises(OSError, match="disk full"):
        again.close()
    assert wandb.run is None  # the run ended all the same


@pytest.mark.parametrize("ending,status", [("close", "FINISHED"), ("close_stopped", "KILLED")])
def test_a_trl_runs_hf_mlflow_log_artifacts_logs_the_trained_model(tmp_path, monkeypatch, ending, status):
    """$HF_MLFLOW_LOG_ARTIFACTS=1: transformers' MLflowCallback logs model artifacts (each checkpoint);
    polyrl logged none without a word. It logs the trained model folder as ``model/`` at the end,
    also for a run stopped on request (Ctrl-C, SIGTERM: ``close_stopped``, MLflow KILLED), whose
    stop exports the model trained so far (that path skipped the upload, without a word); a polyrl
    run of its own (not a TRL script's) reads no transformers variable."""
    from mlflow.tracking import MlflowClient

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext, TrlRun

    uri = (tmp_path / "mlruns").as_uri()
    mlflow_env(monkeypatch, MLFLOW_TRACKING_URI=uri, HF_MLFLOW_LOG_ARTIFACTS="1")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "llama"}')
    client = MlflowClient(tracking_uri=uri)
    trl_run = MlflowTracker(TrackerContext(tmp_path, "out", "polyrl", {}, trl=True, trl_run=TrlRun()))
    getattr(trl_run, ending)()
    assert [a.path for a in client.list_artifacts(trl_run.run_id, "model")] == ["model/config.json"]
    assert client.get_run(trl_run.run_id).info.status == status
    own = MlflowTracker(TrackerContext(tmp_path, "out", "polyrl", {}))
    getattr(own, ending)()
    assert client.list_artifacts(own.run_id) == []


def test_a_trl_runs_hf_mlflow_log_artifacts_logs_each_checkpoint_as_transformers_does(tmp_path, monkeypatch,
                                                                                    tiny_model_dir):
    """transformers' MLflowCallback.on_save logs each checkpoint (``checkpoint-{global_step}``) with
    $HF_MLFLOW_LOG_ARTIFACTS=1; polyrl logged only the final model (a startup warning said so). A
    real TRL run saving at every step: each checkpoint folder's files are in the MLflow file store
    under checkpoint-N/, byte for byte, beside the final model/."""
    pytest.importorskip("polyrl_torch")
    trl = pytest.importorskip("trl")
    from mlflow.tracking import MlflowClient
    from transformers import TrainerCallback

    from polyrl.trl import GRPOTrainer

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("HF_MLFLOW_LOG_ARTIFACTS", "1")
    for key in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TAGS", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    out = tmp_path / "out"
    args = trl.GRPOConfig(output_dir=str(out), use_cpu=True, bf16=False, report_to="mlflow", max_steps=2,
                          num_generations=2, per_device_train_batch_size=2, max_completion_length=4, disable_tqdm=True)

    class SaveEveryStep(TrainerCallback):  # a checkpoint at step 1 too (save_steps 500 is past the end)
        def on_step_end(self, args, state, control, **kwargs):
            control.should_save = True

    GRPOTrainer(model=tiny_model_dir, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                train_dataset=[{"prompt": "What is 1 + 1?"}] * 2, args=args, callbacks=[SaveEveryStep()]).train()

    client = MlflowClient(tracking_uri=uri)
    (run,) = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    names = {a.path for a in client.list_artifacts(run.info.run_id)} - {"completions"}  # polyrl's samples
    assert sorted(names) == ["checkpoint-1", "checkpoint-2", "model"]
    store = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "fetched")))
    for step in (1, 2):
        saved = out / "checkpoints" / f"step-{step:08d}"
        files = sorted(p.relative_to(saved) for p in saved.rglob("*") if p.is_file())
        logged = store / f"checkpoint-{step}"
        assert sorted(p.relative_to(logged) for p in logged.rglob("*") if p.is_file()) == files
        assert Path("model/config.json") in files and Path("trainer_state.json") in files
        assert all((logged / f).read_bytes() == (saved / f).read_bytes() for f in files)


def test_a_logged_checkpoint_leaves_out_the_start_folders_it_keeps(tmp_path, monkeypatch):
    """A checkpoint's kept start folders (``kept_inputs``: the KL reference, a full model hard-linked
    into every checkpoint, and the initial adapter) are the run's inputs: uploading them with each
    checkpoint would send a whole model each save. Only without $HF_MLFLOW_LOG_ARTIFACTS nothing is logged."""
    from mlflow.tracking import MlflowClient

    from polyrl.tracking.mlflow import MlflowTracker
    from polyrl.tracking.spec import TrackerContext, TrlRun

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    for key in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TAGS", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    step = tmp_path / "checkpoints" / "step-00000003"
    for folder in ("model", "engine_state", "initial_reference", "initial_adapter"):
        (step / folder).mkdir(parents=True)
        (step / folder / "weights.bin").write_bytes(folder.encode())
    (step / "trainer_state.json").write_text("{}")
    client = MlflowClient(tracking_uri=uri)
    for value, wanted in (("1", ["checkpoint-6/engine_state", "checkpoint-6/model", "checkpoint-6/trainer_state.json"]),
                          ("0", [])):
        monkeypatch.setenv("HF_MLFLOW_LOG_ARTIFACTS", value)
        tracker = MlflowTracker(TrackerContext(tmp_path, "out", "polyrl", {}, trl=True, trl_run=TrlRun()))
        tracker.log_checkpoint(str(step), 6)
        assert [a.path for a in client.list_artifacts(tracker.run_id, "checkpoint-6")] == wanted


@pytest.mark.slow
def test_mlflow_says_the_command_that_opens_its_file_store(tmp_path):
    """The README's ``mlflow ui --backend-store-uri output_dir/mlruns`` failed on the store a run
    wrote: MLflow 3 refuses a file store without ``MLFLOW_ALLOW_FILE_STORE=true``, which the tracker
    sets for itself only, and the start did not say where the store is. It now logs the command;
    the store opens, in a shell without the variable, with the variable that command sets."""
    import re

    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    code = ("import sys\nfrom pathlib import Path\nfrom polyrl.tracking.spec import TrackerContext\n"
            "from polyrl.tracking.mlflow import MlflowTracker\n"
            "t = MlflowTracker(TrackerContext(Path(sys.argv[1]), 'r', 'proj', {}))\n"
            "t.log_metrics({'loss': 0.25}, 1)\nt.close()\n")
    proc = fresh_python(code, str(out), env=env)
    said = re.search(r"([A-Z_]+)=(\S+) mlflow ui --backend-store-uri ([^\s']+)", proc.stderr)
    assert said, proc.stderr
    assert said[3] == str((out / "mlruns").resolve())
    read = ("import sys\nfrom mlflow.tracking import MlflowClient\nc = MlflowClient(tracking_uri=sys.argv[1])\n"
            "exp = c.get_experiment_by_name('proj')\n"
            "print([m.value for r in c.search_runs([exp.experiment_id]) for m in c.get_metric_history(r.info.run_id, 'loss')])\n")
    opened = fresh_python(read, said[3], env={**env, said[1]: said[2]})
    assert opened.stdout.strip() == "[0.25]", opened.stdout


def stopped_toy_run(tmp_path: Path, stop_at: int | None, tracker: str) -> None:
    """A 4-step toy run (project polyrl-stop) reporting to ``tracker``, stopped on request as by
    Ctrl-C or SIGTERM after step ``stop_at`` (None: it takes every step)."""
    from test_step_numbering import _stopper, toy_run

    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    holder: dict = {"stop_at": stop_at}
    data = toy_run(tmp_path, steps=4, report_to=[tracker], project="polyrl-stop")
    data["rewards"] = [{"name": "stopper"}]
    holder["trainer"] = trainer = Trainer(RunConfig.from_dict(data), extra_plugins=(_stopper(holder),))
    summary = trainer.run(progress=False)
    assert summary["steps"] == (stop_at or 4) and bool(summary.get("stopped_early")) == bool(stop_at)


@pytest.mark.parametrize("stop_at", [2, None])
def test_a_run_stopped_on_request_ends_its_mlflow_run_as_killed(toy, tmp_path, monkeypatch, stop_at):
    """A run stopped by Ctrl-C or SIGTERM at step 2 of 4 ended its MLflow run FINISHED, as one that
    took every step: a sweep's "finished" filter kept it. It is now KILLED, MLflow's state for a run
    its user interrupted; a run that takes every step stays FINISHED."""
    from mlflow.tracking import MlflowClient

    mlflow_env(monkeypatch)
    stopped_toy_run(tmp_path, stop_at, "mlflow")
    client = MlflowClient(tracking_uri=(tmp_path / "run" / "mlruns").resolve().as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("polyrl-stop").experiment_id])
    assert found.info.status == ("KILLED" if stop_at else "FINISHED")


def _wandb_exit_codes(folder: Path) -> list[int]:
    """The exit records of the offline W&B runs under ``folder``, read from their .wandb files."""
    return [record.exit.exit_code for log_file in closed_wandb_files(folder)
            for kind, record in wandb_records(log_file) if kind == "exit"]


@pytest.mark.parametrize("stop_at", [2, None])
def test_a_run_stopped_on_request_ends_its_wandb_run_with_ctrl_c_exit_code(toy, tmp_path, monkeypatch, stop_at):
    """A run stopped by Ctrl-C or SIGTERM at step 2 of 4 finished its W&B run with exit code 0, as
    one that took every step. It now records 255, wandb's own exit code for a script a Ctrl-C ends
    (a failed run in W&B's filters); a run that takes every step stays 0. Read back from the
    offline run's .wandb file."""
    for name in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_LOG_MODEL", "WANDB_WATCH"):
        monkeypatch.delenv(name, raising=False)
    stopped_toy_run(tmp_path, stop_at, "wandb")
    assert _wandb_exit_codes(tmp_path / "run") == [255 if stop_at else 0]


def test_trackio_runs_stopped_or_failed_carry_an_alert_saying_so(tmp_path):
    """trackio keeps no run state: a run stopped on request or ended by an error read as one that
    took every step. close_stopped and close_failed now leave a warning and an error alert on the
    run; a clean close leaves none. Read back with trackio's own store reader (a fresh interpreter:
    trackio fixes its store folder when first imported)."""
    code = ("import json, sys\nfrom pathlib import Path\nfrom polyrl.tracking.spec import TrackerContext\n"
            "from polyrl.tracking.trackio import TrackioTracker\n"
            "for name, end in (('stopped', 'close_stopped'), ('failed', 'close_failed'), ('whole', 'close')):\n"
            "    t = TrackioTracker(TrackerContext(Path(sys.argv[1]), name, 'p', {}))\n"
            "    t.log_metrics({'loss': 0.5}, 1)\n    t.log_metrics({'loss': 0.25}, 2)\n    getattr(t, end)()\n"
            "from trackio.sqlite_storage import SQLiteStorage\n"
            "print('ALERTS ' + json.dumps({n: [(a['level'], a['title'], a['step']) for a in SQLiteStorage.get_alerts('p', run_name=n)]"
            " for n in ('stopped', 'failed', 'whole')}))\n")
    proc = fresh_python(code, str(tmp_path), env=environ_without(TRACKIO_CHOICES))
    alerts = json.loads(proc.stdout.split("ALERTS ")[-1].splitlines()[0])
    assert alerts == {"stopped": [["warn", "polyrl: run stopped on request before its last step", 2]],
                      "failed": [["error", "polyrl: run ended with an error", 2]], "whole": []}


def test_trackio_alerts_of_a_trl_script_run_advise_that_scripts_resume(tmp_path):
    """polyrl report and the trainer's own messages tell a run a TRL script started to resume with
    the script's ``trainer.train(resume_from_checkpoint=True)``; trackio's alert on such a stopped
    or failed run still said ``polyrl train CONFIG --resume``, a config the run never had."""
    code = ("import json, sys\nfrom pathlib import Path\nfrom polyrl.tracking.spec import TrackerContext\n"
            "from polyrl.tracking.trackio import TrackioTracker\n"
            "for name, started in (('cli', None), ('script', {'by': 'trl', 'script': '/work/train.py'})):\n"
            "    t = TrackioTracker(TrackerContext(Path(sys.argv[1]), name, 'p', {}, trl=started is not None,\n"
            "                                      started_by=started))\n"
            "    t.log_metrics({'loss': 0.5}, 1)\n    t.close_stopped()\n"
            "from trackio.sqlite_storage import SQLiteStorage\n"
            "print('ALERTS ' + json.dumps({n: [a['text'] for a in SQLiteStorage.get_alerts('p', run_name=n)]"
            " for n in ('cli', 'script')}))\n")
    proc = fresh_python(code, str(tmp_path), env=environ_without(TRACKIO_CHOICES))
    alerts = json.loads(proc.stdout.split("ALERTS ")[-1].splitlines()[0])
    said = "metrics.jsonl and polyrl report RUN_DIR say which step it reached; "
    assert alerts == {"cli": [said + "polyrl train CONFIG --resume continues it"],
                      "script": [said + "trainer.train(resume_from_checkpoint=True) in the TRL script, run again "
                                 "(python /work/train.py) continues it"]}


@pytest.mark.slow
def test_relative_stores_named_by_the_environment_stay_where_the_run_started(tmp_path, tiny_model_dir):
    """MLFLOW_TRACKING_URI=mlstore and TRACKIO_DIR=trackstore, relative as a shell sets them: MLflow
    keeps its file store's root as given and trackio its folder, so a working folder moved by plugin
    code (here between the trainer's start and its run, as a reward's os.chdir while the tracker's
    thread writes) sent the run's metrics into another store. Both are named from the run's start."""
    home = tmp_path / "home"
    (home / "elsewhere").mkdir(parents=True)
    data = {"model": {"path": tiny_model_dir}, "generation": {"group_size": 2, "max_new_tokens": 4},
            "data": {"task": "arithmetic", "options": {"count": 8}},
            "rewards": [{"name": "length_penalty", "options": {"target": 2, "unit": "chars"}}],
            "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": "out"},
            "logging": {"report_to": ["mlflow", "trackio"], "run_name": "moved", "project": "polyrl-moved"}}
    code = ("import json, os, sys\nfrom polyrl.config import RunConfig\nfrom polyrl.trainer import Trainer\n"
            "trainer = Trainer(RunConfig.from_dict(json.loads(sys.argv[1])))\n"
            "os.chdir('elsewhere')\ntrainer.run(progress=False)\n")
    env = {**environ_without(MLFLOW_CHOICES + TRACKIO_CHOICES), "MLFLOW_TRACKING_URI": "mlstore",
           "TRACKIO_DIR": "trackstore", "MLFLOW_ALLOW_FILE_STORE": "true"}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(data)], cwd=home, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (home / "elsewhere" / "mlstore").exists() and not (home / "elsewhere" / "trackstore").exists()
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(home / "mlstore").as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("polyrl-moved").experiment_id])
    assert [m.step for m in client.get_metric_history(found.info.run_id, "reward_mean")] == [1]
    assert list((home / "trackstore").glob("polyrl-moved*.db")), sorted(p.name for p in (home / "trackstore").iterdir())


@pytest.mark.parametrize(("uri", "anchored"), [
    ("mlruns", "/start/mlruns"), ("file:rel", "file:///start/rel"), ("sqlite:///m.db", "sqlite:////start/m.db"),
    ("sqlite+pysqlite:///m.db?timeout=3", "sqlite+pysqlite:////start/m.db?timeout=3"),
    ("/abs", "/abs"), ("file:///abs", "file:///abs"), ("sqlite:////abs.db", "sqlite:////abs.db"),
    ("sqlite:///:memory:", "sqlite:///:memory:"), ("http://host:5000", "http://host:5000"),
    ("databricks", "databricks"), ("postgresql://u@h/db", "postgresql://u@h/db"), ("", "")])
def test_only_a_relative_local_mlflow_store_is_named_from_the_start(uri, anchored):
    from polyrl.tracking.mlflow import anchored_uri

    assert anchored_uri(uri, "/start") == anchored
    assert anchored_uri(uri, None) == uri
