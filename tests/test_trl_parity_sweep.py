"""What a TRL user brings, probed against TRL 1.16's own behaviour (``GRPOTrainer._calculate_rewards``,
``trl.trainer.utils.get_callable_name``, ``trl.data_utils.apply_chat_template``):

- return values TRL reads (it iterates them into ``torch.tensor``): tensors, lists of 0-d tensors,
  generators;
- reward names TRL derives for callable objects and ``functools.partial``;
- a reward that edits its arguments in place must not change other rewards' inputs or the data;
- ``log_extra`` columns reach the completions log (TRL's completions table);
- a sample no reward scored is a warning (TRL warns);
- dataset shapes TRL reads differently from what polyrl would do (VLM ``image``/``images``
  columns, a prompt ending with an assistant message that TRL continues) are one error;
- peft's ``LoraConfig`` names in ``[lora]`` get a fix naming polyrl's key.
"""

from __future__ import annotations

import functools
import json
import sys

import numpy as np
import pytest

from polyrl.errors import ConfigError, RewardError
from polyrl.rewards.trl_compat import callable_name
from polyrl.tracking.completions import sample_records
from polyrl.types import Completion

from test_trl_rewards import CHAT, scored

ROWS = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}]


def _gen(completions, **kwargs):
    return (float(i) for i, _ in enumerate(completions))


@pytest.mark.parametrize("make", [
    lambda torch: torch.tensor([0.0, 1.0]),
    lambda torch: [torch.tensor(0.0), torch.tensor(1.0)],
    lambda torch: torch.tensor([0.0, 1.0], dtype=torch.bfloat16),
    lambda torch: [np.float32(0.0), np.array(1.0)],
], ids=["tensor", "list-of-0d-tensors", "bf16-tensor", "numpy-scalars-and-0d-array"])
def test_tensor_results_are_read_as_trl_reads_them(make):
    torch = pytest.importorskip("torch")

    def tensor_reward(completions, **kwargs):
        return make(torch)

    res = scored([tensor_reward], ["x", "y"], ROWS, columns=["prompt", "answer"])
    np.testing.assert_array_equal(res.total, [0.0, 1.0])


def test_a_generator_is_drawn_like_trl_does():
    res = scored([_gen], ["x", "y"], ROWS, columns=["prompt", "answer"])
    np.testing.assert_array_equal(res.total, [0.0, 1.0])


def test_a_2d_tensor_of_several_values_a_sample_is_still_an_error_naming_the_reward():
    """(n, 1), a reward model's logits, is n scores (TRL's ``torch.tensor`` reads it so); (n, 2)
    is no list of scores there either."""
    torch = pytest.importorskip("torch")

    def grid(completions, **kwargs):
        return torch.zeros(2, 2)

    with pytest.raises(RewardError, match=r"reward 'grid' .*returned tensor\(\[0\., 0\.\]\) for sample 0 "
                                          r"\(a Tensor, not a number\)"):
        scored([grid], ["x", "y"], ROWS)


class LengthScorer:
    def __call__(self, completions, **kwargs):
        return [float(len(c)) for c in completions]


class AsyncScorer:
    async def __call__(self, completions, **kwargs):
        return [2.0] * len(completions)


def _scaled(completions, scale, **kwargs):
    return [scale] * len(completions)


def test_callable_objects_and_partials_are_named_as_trl_names_them():
    """Two callable objects used to be both named 'reward' (then 'configured twice')."""
    fns = [LengthScorer(), AsyncScorer(), functools.partial(_scaled, scale=3.0),
           functools.partial(AsyncScorer())]
    assert [callable_name(f) for f in fns] == ["LengthScorer", "AsyncScorer", "_scaled", "AsyncScorer"]
    res = scored(fns[:3], ["xy", "z"], ROWS)
    assert list(res.per_reward) == ["LengthScorer", "AsyncScorer", "_scaled"]
    np.testing.assert_array_equal(res.total, [2.0 + 2.0 + 3.0, 1.0 + 2.0 + 3.0])


def test_a_partial_of_an_async_callable_object_is_awaited():
    res = scored([functools.partial(AsyncScorer())], ["x", "y"], ROWS)
    np.testing.assert_array_equal(res.total, [2.0, 2.0])


def test_a_reward_that_edits_its_inputs_changes_nothing_outside_its_call():
    """The trainer repeats one row object per completion; JSON rows live for the whole run."""
    row = {"prompt": [dict(m) for m in CHAT], "answer": [4], "meta": {"k": 1}}
    rows = [row, row]  # as Trainer._rows_per_completion hands them over
    seen = {}

    def vandal(prompts, completions, answer, meta, **kwargs):
        prompts[0].append({"role": "assistant", "content": "MUTATED"})
        prompts[1][0]["content"] = "changed"
        answer[0].append(99)
        meta[1]["k"] = 2
        completions[0][0]["content"] = "changed"
        return [0.0] * len(completions)

    def reader(prompts, completions, answer, meta, **kwargs):
        seen.update(prompts=prompts, answer=answer, meta=meta, completions=completions)
        return [1.0] * len(completions)

    scored([vandal, reader], ["x", "y"], rows, columns=["prompt", "answer", "meta"])
    assert row == {"prompt": CHAT, "answer": [4], "meta": {"k": 1}}
    assert seen["prompts"] == [CHAT, CHAT] and seen["answer"] == [[4], [4]]
    assert seen["meta"] == [{"k": 1}, {"k": 1}]
    assert seen["completions"][0] == [{"role": "assistant", "content": "x"}]


def test_log_extra_columns_reach_the_completions_records():
    def judge(completions, log_extra, **kwargs):
        log_extra("verdict", [f"v{i}" for i in range(len(completions))])
        log_extra("score", np.array([0.5] * len(completions)))
        return [1.0] * len(completions)

    res = scored([judge], ["x", "y"], ROWS)
    assert res.extra == {"verdict": ["v0", "v1"], "score": [0.5, 0.5]}
    comps = [Completion(0, [1], [5], [0.0], text=t) for t in ("x", "y")]
    records = sample_records(3, ["a", "b"], comps, res.per_reward, res.total, [0.0, 0.0], 2, 0, extra=res.extra)
    assert [r["extra"] for r in records] == [{"verdict": "v0", "score": 0.5}, {"verdict": "v1", "score": 0.5}]
    json.dumps(records, allow_nan=False)  # strict JSON, as the file holds it


def test_log_extra_of_the_wrong_length_is_named():
    def short(completions, log_extra, **kwargs):
        log_extra("verdict", ["only one"])
        return [1.0] * len(completions)

    with pytest.raises(RewardError, match=r"reward 'short' .*extra column 'verdict', expected 2.*Fix: pass"):
        scored([short], ["x", "y"], ROWS)


def test_a_sample_no_reward_scored_is_a_warning_as_in_trl():
    from structlog.testing import capture_logs

    def never(completions, **kwargs):
        return [None, 1.0]

    with capture_logs() as logs:
        res = scored([never], ["x", "y"], ROWS)
    assert np.isnan(res.total[0]) and res.total[1] == 1.0
    warned = [e for e in logs if e["log_level"] == "warning" and "no reward scored" in e["event"]]
    assert len(warned) == 1 and warned[0]["samples"] == 1 and warned[0]["first_prompt"] == "'a'"


# --- datasets as TRL users have them ------------------------------------------------------------

def _load(tmp_path, rows, fmt, prompt_column="prompt"):
    from polyrl.data import load_dataset

    path = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import datasets

        datasets.Dataset.from_list(rows).to_parquet(str(path))
    return load_dataset(path=str(path), prompt_column=prompt_column)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("column", ["image", "images"])
def test_a_vlm_image_column_is_refused_not_dropped(tmp_path, fmt, column):
    rows = [{"prompt": "Describe it.", column: "cat.png"}]
    with pytest.raises(ConfigError, match=rf"column '{column}'.*text-only.*Fix: remove the '{column}' column"):
        _load(tmp_path, rows, fmt)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "rows"])
def test_an_images_column_of_empty_lists_is_taken_as_trl_trains_it_text_only(tmp_path, fmt):
    """TRL 1.16 reads a batch whose every ``images`` is ``[]`` as holding no image (``images = None``:
    text-only training, the column still passed to the rewards), as a text subset of a mixed vision
    dataset has it; polyrl refused the column as if it held images it would drop."""
    from polyrl.data import from_rows

    rows = [{"prompt": [{"role": "user", "content": f"{i} + 1?"}], "images": [], "n": i} for i in range(2)]
    dataset = from_rows(rows) if fmt == "rows" else _load(tmp_path, rows, fmt)
    assert [dataset[i]["images"] for i in range(2)] == [[], []]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "rows"])
@pytest.mark.parametrize("value", [["cat.png"], None])
def test_an_images_column_holding_an_image_or_none_in_one_row_is_still_refused(tmp_path, fmt, value):
    """One row's image (TRL's vision path) or None (the vision path too in TRL, which fails on a text
    model) among empty lists: refused naming the column, as before."""
    from polyrl.data import from_rows

    rows = [{"prompt": "Describe it.", "images": []}, {"prompt": "And this?", "images": value}]
    with pytest.raises(ConfigError, match=r"column 'images'.*text-only.*Fix: remove the 'images' column"):
        from_rows(rows) if fmt == "rows" else _load(tmp_path, rows, fmt)


def test_a_reward_gets_the_empty_images_column_as_trl_passes_it(toy, tmp_path):
    """The run trains, and a reward reading ``images`` gets each row's ``[]``, as TRL passes it."""
    from test_trl_rewards import _api_run

    seen = []

    def spy(prompts, completions, images, **kwargs):
        seen.extend(images)
        return [0.0] * len(completions)

    _api_run(tmp_path, [spy], prompts=[{"prompt": f"p{i}", "images": []} for i in range(2)])
    assert seen == [[]] * 4


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "rows"])
def test_a_prompt_ending_with_an_assistant_message_is_taken_as_trl_takes_it_with_one_warning(tmp_path, fmt):
    """TRL 1.16's GRPOTrainer takes a chat prompt ending with an assistant message (it renders it
    closed, a new assistant turn after it: ``_tokenize_prompts``' ``add_generation_prompt=True``);
    polyrl refused it. One warning names the first such row and how many there are, since a
    'messages' column (whole conversations, answer last) as the prompt is the common mistake."""
    from structlog.testing import capture_logs

    from polyrl.data import from_rows

    ok = [{"role": "user", "content": "2+2?"}]
    answered = [*ok, {"role": "assistant", "content": "4"}]
    rows = [{"messages": ok}, {"messages": answered}, {"messages": answered}]
    with capture_logs() as logs:
        dataset = from_rows(rows, prompt_column="messages") if fmt == "rows" else \
            _load(tmp_path, rows, fmt, prompt_column="messages")
    assert dataset[1]["messages"] == answered
    warned = [e for e in logs if e["log_level"] == "warning" and "ends with an assistant message" in e["event"]]
    assert len(warned) == 1
    assert "row 1" in warned[0]["event"] and "(2 prompts do)" in warned[0]["event"]
    assert "move it to an answer column" in warned[0]["fix"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_assistant_turn_inside_the_prompt_is_fine(tmp_path, fmt):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"},
            {"role": "assistant", "content": "2"}, {"role": "user", "content": "2+2?"}]
    dataset = _load(tmp_path, [{"prompt": chat, "n": 1}, {"prompt": chat[1:2], "n": 2}], fmt)
    assert dataset[0]["prompt"] == chat


# --- LoRA written with peft's names ---------------------------------------------------------------

@pytest.mark.parametrize("key, value, fix", [
    ("r", 8, "polyrl names peft's r 'rank'"),
    ("lora_alpha", 16, "'alpha'"),
    ("bias", "none", "polyrl trains no biases"),
    ("modules_to_save", ["lm_head"], "trains the adapters only"),
    ("task_type", "CAUSAL_LM", "causal LM"),
    ("use_dora", True, "use_dora is not supported"),
])
def test_peft_names_in_lora_get_polyrl_s_name_as_the_fix(key, value, fix):
    from polyrl.config import RunConfig

    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"model": {"path": "x"}, "data": {"task": "arithmetic"},
                             "rewards": [{"name": "numeric_match"}], "lora": {key: value}})
    assert info.value.field == f"lora.{key}"
    assert fix in str(info.value), str(info.value)


# --- end to end: polyrl train with a reward that edits its inputs and logs extra columns ----------

REWARDS = '''
def vandal(prompts, completions, answer, **kwargs):
    for p in prompts:
        p.append({"role": "assistant", "content": "MUTATED"})
    for a in answer:
        a.append(99)
    return [0.0] * len(completions)

def witness(prompts, completions, answer, log_extra, **kwargs):
    assert all(len(p) == 2 for p in prompts) and all(a == [4] for a in answer), (prompts, answer)
    log_extra("turns", [len(p) for p in prompts])
    return [float(len(c[0]["content"])) for c in completions]
'''


def test_a_run_with_an_editing_reward_trains_on_its_own_data(tiny_model_dir, tmp_path, monkeypatch):
    from polyrl.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rw.py").write_text(REWARDS)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": chat, "answer": [4]}) + "\n")
    (tmp_path / "run.toml").write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        '[data]\npath = "d.jsonl"\n[[rewards]]\nfunction = "rw.py:vandal"\n[[rewards]]\nfunction = "rw.py:witness"\n'
        '[train]\nsteps = 2\nprompts_per_step = 1\nthreads = 1\noutput_dir = "out"\n')
    assert main(["train", "run.toml", "--no-progress"]) == 0
    records = [json.loads(line) for line in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()]
    assert {r["step"] for r in records} == {1, 2}  # the first step is 1
    assert all(r["prompt"] == chat and r["extra"] == {"turns": 2} for r in records), records
    sys.modules.pop("rw", None)


# --- return containers: ordered ones read as TRL reads them, unordered or misread ones named ---------


class _Ordered:
    """An iterable that is neither a list nor an iterator (a user's own container)."""

    def __iter__(self):
        return iter([0.5, 1.0, 2.0])


@pytest.mark.parametrize("make", [
    lambda: {"c": 0.5, "a": 1.0, "b": 2.0}.values(),
    _Ordered,
    lambda: (np.float32(0.5), np.float64(1.0), np.float16(2.0)),
    lambda: pytest.importorskip("pandas").Series([0.5, 1.0, 2.0], index=[2, 0, 1]),
    lambda: __import__("collections").deque([0.5, 1.0, 2.0]),
], ids=["dict-values", "own-iterable", "tuple-of-numpy-floats", "series", "deque"])
def test_ordered_return_values_are_read_in_order_as_trl_reads_them(make):
    """Once: ``dict.values()`` and a user's iterable were refused ("returned dict_values, not a list
    of scores"), where TRL iterates them into its scores."""
    torch = pytest.importorskip("torch")

    def scorer(completions, **kwargs):
        return make()

    res = scored([scorer], ["x", "y", "z"], ROWS + [{"prompt": "c", "answer": "3"}])
    assert res.total.tolist() == torch.tensor(list(make()), dtype=torch.float32).tolist() == [0.5, 1.0, 2.0]


def _scored_in(isolation, fn):
    from polyrl.plugins import get_plugin_manager
    from polyrl.rewards.combine import RewardComputer
    from polyrl.rewards.functions import function_reward_plugin
    from polyrl.types import RewardContext

    plugin = function_reward_plugin(fn, isolation=isolation)
    computer = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [(plugin.name, 1.0, {})])
    comps = [Completion(0, [1], [7], [0.0], text=t) for t in ("x", "y")]
    return computer(["a", "b"], comps, RewardContext(rows=ROWS, wanted=(plugin.name,)))


@pytest.mark.parametrize("isolation", ["thread", pytest.param("process", marks=pytest.mark.skipif(
    sys.platform == "win32", reason="fork"))])
@pytest.mark.parametrize("make, said", [
    (lambda: {1.0, 0.5}, r"returned set \(a set has no order: its scores cannot be matched to the completions\)"),
    (lambda: frozenset({1.0, 0.5}), r"returned frozenset \(a set has no order: its scores cannot be matched to the completions\)"),
    (lambda: {0: 0.5, 1: 1.0}, r"returned dict \(TRL would read its keys as the scores\)"),
    (lambda: {0.5: "a", 1.0: "b"}.keys(), r"returned dict_keys \(a dict's keys or items, not its values in the completions' order\)"),
    (lambda: np.array(0.5), r"returned ndarray \(one number for the whole batch, not one score per completion\)"),
    (lambda: bytearray(b"\x00\x01"), r"returned bytearray \(text or bytes, not scores\)"),
], ids=["set", "frozenset", "dict", "dict-keys", "0-d-array", "bytearray"])
def test_unordered_or_misread_return_values_are_refused_alike_on_a_thread_and_in_a_child(isolation, make, said):
    """A set's order is its hashes': TRL scores the completions in it, silently wrong. A bytearray
    was read here as its bytes (scores 0 and 1); from a forked child a set or a dict_values was
    "its answer could not be sent back (TypeError: set is not JSON data)"."""
    def scorer(completions, **kwargs):
        return make()

    with pytest.raises(RewardError, match=said + r", not a list of scores\. Fix: return a list of 2 floats in the "
                                                r"completions' order"):
        _scored_in(isolation, scorer)
