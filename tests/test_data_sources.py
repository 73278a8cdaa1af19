"""Data through 🤗 datasets: file formats, globs, save_to_disk folders, cached Hub datasets by name,
column mapping, system prompts, eval sources, memory-mapped rows and the sampler over them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polyrl.config import DataSection, RunConfig
from polyrl.data import Dataset, PromptSampler, from_rows, load_dataset, load_train_and_eval
from polyrl.errors import ConfigError

ROWS = [
    {"prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "question": f"What is {i} + 1?",
     "answer": str(i + 1)}
    for i in range(12)
]
TEXT_ROWS = [{"question": r["question"], "solution": r["answer"]} for r in ROWS]


def _write(tmp_path: Path, rows: list[dict], name: str) -> Path:
    path = tmp_path / name
    table = pa.Table.from_pylist(rows)
    suffix = path.suffix
    if suffix == ".parquet":
        pq.write_table(table, path)
    elif suffix == ".arrow":
        with pa.ipc.new_stream(path, table.schema) as writer:
            writer.write_table(table)
    elif suffix in (".csv", ".tsv"):
        table.to_pandas().to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",")
    elif suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def cache(tmp_path) -> str:
    return str(tmp_path / "hf-cache")


@pytest.mark.parametrize("name", ["d.parquet", "d.arrow", "d.jsonl", "d.json"])
def test_every_format_gives_the_same_chat_rows(tmp_path, cache, name):
    ds = load_dataset(path=str(_write(tmp_path, ROWS, name)), cache_dir=cache)
    assert ds.rows == ROWS
    assert ds.arrow_backed == name.endswith((".parquet", ".arrow"))


@pytest.mark.parametrize("name", ["d.csv", "d.tsv"])
def test_csv_with_a_column_mapping(tmp_path, cache, name):
    path = _write(tmp_path, TEXT_ROWS, name)
    ds = load_dataset(path=str(path), cache_dir=cache, columns={"prompt": "question", "answer": "solution"})
    assert ds.arrow_backed
    assert [r["prompt"] for r in ds] == [r["question"] for r in TEXT_ROWS]
    # CSV cells are read as typed columns: the mapped answer arrives as the number it looks like
    assert [str(r["answer"]) for r in ds] == [r["solution"] for r in TEXT_ROWS]
    assert ds[0]["question"] == TEXT_ROWS[0]["question"]  # the source column stays visible


@pytest.mark.parametrize("name", ["d.parquet", "d.jsonl"])
def test_a_mapping_onto_a_column_the_dataset_has_is_one_error_not_a_hidden_column(tmp_path, cache, name):
    """``columns = {answer = "solution"}`` on rows that hold an ``answer`` of their own (GSM8K's
    worked solution beside a final number): every row's ``answer`` became the solution's value, so
    a reward function's ``answer`` argument, which TRL fills with the dataset's own column, read
    another column, unsaid. Mapping the prompt (which no reward reads by name) is not refused."""
    rows = [{**r, "solution": f"#### {r['answer']}"} for r in ROWS]
    path = str(_write(tmp_path, rows, name))
    with pytest.raises(ConfigError, match=r"data.columns maps 'answer' to the column 'solution', but .* has an? "
                                          r"'answer' column of its own") as err:
        load_dataset(path=path, cache_dir=cache, columns={"answer": "solution"})
    assert err.value.field == "data.columns.answer" and "options.column = 'solution'" in err.value.fix
    ds = load_dataset(path=path, cache_dir=cache, columns={"prompt": "question", "final": "answer"})
    assert ds[0]["final"] == ds[0]["answer"] == "1" and ds[0]["prompt"] == "What is 0 + 1?"


def test_a_list_and_a_glob_of_files_concatenate_in_order(tmp_path, cache):
    for k in range(3):
        _write(tmp_path, ROWS[4 * k:4 * k + 4], f"part-{k}.parquet")
    globbed = load_dataset(path=str(tmp_path / "part-*.parquet"), cache_dir=cache)
    listed = load_dataset(path=[str(tmp_path / f"part-{k}.parquet") for k in range(3)], cache_dir=cache)
    assert globbed.rows == listed.rows == ROWS
    assert globbed.fingerprint() == listed.fingerprint()
    jsonl = [str(_write(tmp_path, ROWS[:6], "a.jsonl")), str(_write(tmp_path, ROWS[6:], "b.jsonl"))]
    assert load_dataset(path=jsonl).rows == ROWS


def test_save_to_disk_dataset_and_dataset_dict(tmp_path):
    single, both = tmp_path / "single", tmp_path / "both"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(single))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:8]),
                          "test": datasets.Dataset.from_list(ROWS[8:])}).save_to_disk(str(both))
    assert load_dataset(path=str(single)).rows == ROWS
    assert load_dataset(path=str(both)).rows == ROWS[:8]
    assert load_dataset(path=str(both), source_split="test").rows == ROWS[8:]
    with pytest.raises(ConfigError, match=r"no split 'validation' \(its splits: train, test\)") as info:
        load_dataset(path=str(both), source_split="validation")
    assert info.value.field == "data.split"
    with pytest.raises(ConfigError, match="single Dataset") as info:
        load_dataset(path=str(single), source_split="test")
    assert info.value.field == "data.split"


def _cache_a_hub_dataset(tmp_path: Path, cache: str, repo: str) -> None:
    """Fill ``cache`` the way 🤗 datasets does on a first online ``load_dataset(repo)``.

    A Hub dataset repository is a folder of ``data/<split>-*.parquet`` files; loading one writes
    ``<cache>/<name>/default/<version>/<hash>/`` Arrow files. Offline, ``load_dataset("<name>")``
    finds them there (``CachedDatasetModuleFactory``). We load the same folder layout from disk,
    then delete the source, so only the cache can answer. A namespaced repo ("org/name") is
    cached under "org___name"; that is the only part we emulate (by renaming the folder).
    """
    name = repo.split("/")[-1]
    source = tmp_path / "hub" / name
    (source / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(TEXT_ROWS[:9]), source / "data" / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(TEXT_ROWS[9:]), source / "data" / "test-00000-of-00001.parquet")
    datasets.load_dataset(str(source), cache_dir=cache)
    shutil.rmtree(source)
    if "/" in repo:
        (Path(cache) / name).rename(Path(cache) / repo.replace("/", "___"))


@pytest.mark.parametrize("repo", ["tiny_math", "polyrl-tests/tiny_math"])
def test_a_cached_hub_dataset_by_name_offline(tmp_path, cache, repo, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no local folder may shadow the name
    _cache_a_hub_dataset(tmp_path, cache, repo)
    columns = {"prompt": "question", "answer": "solution"}
    train = load_dataset(name=repo, cache_dir=cache, columns=columns)
    assert train.arrow_backed and [r["prompt"] for r in train] == [r["question"] for r in TEXT_ROWS[:9]]
    test = load_dataset(name=repo, source_split="test", cache_dir=cache, columns=columns)
    assert [r["answer"] for r in test] == [r["solution"] for r in TEXT_ROWS[9:]]
    train, held = load_train_and_eval(DataSection(name=repo, cache_dir=cache, columns=columns, eval_split="test"), 5)
    assert train.rows == load_dataset(name=repo, cache_dir=cache, columns=columns).rows
    assert held.rows == test.rows
    with pytest.raises(ConfigError, match="Unknown split") as info:
        load_dataset(name=repo, source_split="validation", cache_dir=cache, columns=columns)
    assert info.value.field == "data.split"
    with pytest.raises(ConfigError, match="other") as info:
        load_dataset(name=repo, config="other", cache_dir=cache, columns=columns)
    assert info.value.field == "data.config"


def test_an_eval_split_slicing_the_training_rows_is_refused(tmp_path, cache, monkeypatch):
    """A slice of the training split is a different name but the same rows: evaluating there
    would score prompts the policy trains on. Disjoint slices of one split still work."""
    monkeypatch.chdir(tmp_path)
    _cache_a_hub_dataset(tmp_path, cache, "tiny_math")
    columns = {"prompt": "question", "answer": "solution"}
    overlapping = [(None, "train[:5]", "rows 0-4"), ("train[:5]", "train[3:]", "rows 3-4"),
                   ("train[:50%]", "test+train[-6:]", "row 3 "), ("train[:-1]", "train[:100%]", "rows 0-7")]
    for split, eval_split, rows in overlapping:
        section = DataSection(name="tiny_math", split=split, eval_split=eval_split, cache_dir=cache, columns=columns)
        with pytest.raises(ConfigError) as info:
            load_train_and_eval(section, eval_count=3)
        assert info.value.field == "data.eval_split" and rows in info.value.message, (split, eval_split)
        assert 'eval_split = "train[90%:]"' in info.value.fix
    whole = [r["question"] for r in TEXT_ROWS[:9]]
    for split, eval_split in [("train[:90%]", "train[90%:]"), ("train[:6]", "train[6:]"), ("train[-3:]", "test")]:
        section = DataSection(name="tiny_math", split=split, eval_split=eval_split, cache_dir=cache, columns=columns)
        train, held = load_train_and_eval(section, eval_count=9)
        assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}, (split, eval_split)
    train, held = load_train_and_eval(DataSection(name="tiny_math", split="train[:90%]", eval_split="train[90%:]",
                                                  cache_dir=cache, columns=columns), eval_count=9)
    assert [r["prompt"] for r in train] + [r["prompt"] for r in held] == whole


def test_a_dataset_not_in_the_cache_is_a_clear_error(tmp_path, cache):
    with pytest.raises(ConfigError, match="not in the local datasets cache") as info:
        load_dataset(name="nobody/never-downloaded", cache_dir=cache)
    assert info.value.field == "data.name" and "cache_dir" in info.value.fix


def test_system_prompt_for_chat_and_text_prompts(tmp_path, cache):
    path = _write(tmp_path, ROWS, "d.parquet")
    chat = load_dataset(path=str(path), cache_dir=cache, system_prompt="Answer briefly.")
    assert chat[0]["prompt"] == [{"role": "system", "content": "Answer briefly."}, *ROWS[0]["prompt"]]
    text = load_dataset(path=str(path), cache_dir=cache, columns={"prompt": "question"}, system_prompt="Be exact.")
    assert text[2]["prompt"] == [{"role": "system", "content": "Be exact."},
                                 {"role": "user", "content": ROWS[2]["question"]}]
    own = [{"prompt": [{"role": "system", "content": "mine"}, {"role": "user", "content": "hi"}]}]
    assert load_dataset(rows=own, system_prompt="theirs")[0]["prompt"] == own[0]["prompt"]
    assert chat.fingerprint() != load_dataset(path=str(path), cache_dir=cache).fingerprint()


def test_chat_messages_come_as_datasets_gives_them_to_trl(tmp_path, cache):
    """A Parquet file stores ``name = null`` for a message without one; 🤗 datasets gives it back as
    ``"name": None``, which TRL hands the chat template and the rewards. polyrl dropped those keys
    from the prompt column only, so a reward saw other messages from the same file than under TRL.
    The same rows as JSON lines have no such key, on both sides (datasets reads them as ``Json``)."""
    rows = [{"prompt": [{"role": "system", "content": "s", "name": "ann"}, {"role": "user", "content": "hi"}],
             "answer": "1"},
            {"prompt": [{"role": "user", "content": "yo"}], "answer": "2"}]
    path = _write(tmp_path, rows, "d.parquet")
    as_trl = list(datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")))
    assert as_trl[1]["prompt"] == [{"role": "user", "content": "yo", "name": None}]
    assert load_dataset(path=str(path), cache_dir=cache).take([0, 1]) == as_trl
    lines = tmp_path / "d.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    as_trl = list(datasets.load_dataset("json", data_files=str(lines), split="train", cache_dir=str(tmp_path / "hf")))
    assert load_dataset(path=str(lines)).take([0, 1]) == as_trl == rows


def test_other_columns_of_dicts_reach_the_rewards_as_datasets_gives_them(tmp_path, cache):
    """A reward's column of dicts (code tests with ``expected = None``) keeps its None keys, as 🤗
    datasets (so TRL) and the same rows as JSONL do."""
    rows = [{"prompt": "q1", "tests": [{"input": "1", "expected": None}, {"input": "2", "expected": "3"}]},
            {"prompt": "q2", "tests": [{"input": "5", "expected": "6"}]}]
    path = _write(tmp_path, rows, "d.parquet")
    ds = load_dataset(path=str(path), cache_dir=cache)
    as_trl = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert ds.take([0, 1]) == list(as_trl) == rows
    lines = tmp_path / "d.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_dataset(path=str(lines)).take([0, 1]) == rows


def test_hold_out_sampler_and_fingerprint_match_in_memory_rows(tmp_path, cache):
    path = _write(tmp_path, ROWS, "d.parquet")
    options = {"eval_count": 4, "seed": 3}
    train = load_dataset(path=str(path), cache_dir=cache, options=options)
    held = load_dataset(path=str(path), cache_dir=cache, options=options, split="eval")
    memory_train = load_dataset(rows=ROWS, options=options)
    assert train.rows == memory_train.rows
    assert held.rows == load_dataset(rows=ROWS, options=options, split="eval").rows
    assert {r["answer"] for r in train}.isdisjoint(r["answer"] for r in held)
    a, b = PromptSampler(train, 5, seed=9), PromptSampler(memory_train, 5, seed=9)
    assert [a.next_batch() for _ in range(7)] == [b.next_batch() for _ in range(7)]
    again = load_dataset(path=str(path), cache_dir=cache, options=options)
    assert again.fingerprint() == train.fingerprint() != held.fingerprint()
    state = json.loads(json.dumps(a.state()))
    resumed = PromptSampler(again, 5, seed=9)
    resumed.load_state(state)
    assert [resumed.next_batch() for _ in range(3)] == [a.next_batch() for _ in range(3)]
    (tmp_path / "other").mkdir()
    changed = _write(tmp_path / "other", ROWS[::-1], "d.parquet")  # same rows, another order
    with pytest.raises(ConfigError, match="dataset differs"):
        PromptSampler(load_dataset(path=str(changed), cache_dir=cache, options=options), 5, seed=9).load_state(state)
    edited = [{**r, "answer": "0"} if i == 11 else r for i, r in enumerate(ROWS)]  # same size, one cell
    _write(tmp_path / "other", edited, "d.parquet")
    with pytest.raises(ConfigError, match="dataset differs"):
        PromptSampler(load_dataset(path=str(changed), cache_dir=cache, options=options), 5, seed=9).load_state(state)


def test_arrow_rows_stay_memory_mapped(tmp_path, cache):
    """Loading keeps 🤗 datasets' memory-mapped table; no Python row list is built."""
    path = _write(tmp_path, ROWS * 500, "big.parquet")
    ds = load_dataset(path=str(path), cache_dir=cache, options={"eval_count": 10})
    assert ds._rows is None and type(ds._arrow.table.data).__name__ == "MemoryMappedTable"
    assert len(ds) == 12 * 500 - 10
    batch = PromptSampler(ds, 4, seed=0).next_batch()
    assert len(batch) == 4 and all(r["prompt"][0]["role"] == "user" for r in batch)


def test_eval_path_and_eval_split_from_the_data_section(tmp_path, cache):
    train_file, eval_file = _write(tmp_path, ROWS[:8], "train.parquet"), _write(tmp_path, ROWS[8:], "eval.jsonl")
    section = DataSection(path=str(train_file), eval_path=str(eval_file), cache_dir=cache)
    train, held = load_train_and_eval(section, eval_count=3)
    assert train.rows == ROWS[:8] and held.rows == ROWS[8:11]  # nothing held out of train
    assert load_train_and_eval(section, eval_count=0)[1] is None
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:8]),
                          "test": datasets.Dataset.from_list(ROWS[8:])}).save_to_disk(str(saved))
    train, held = load_train_and_eval(DataSection(path=str(saved), eval_split="test"), eval_count=10)
    assert train.rows == ROWS[:8] and held.rows == ROWS[8:]
    with pytest.raises(ConfigError) as info:
        load_train_and_eval(DataSection(path=str(train_file), eval_split="test", cache_dir=cache), eval_count=2)
    assert info.value.field == "data.eval_split"


def test_data_section_from_toml_tables():
    base = {"model": {"path": "m"}, "rewards": [{"name": "numeric_match"}]}
    config = RunConfig.from_dict({**base, "eval": {"count": 8}, "data": {
        "path": ["a.parquet", "b.parquet"], "columns": {"prompt": "question", "answer": "solution"},
        "system_prompt": "Be brief.", "eval_path": "e.parquet"}})
    assert config.data.columns == {"prompt": "question", "answer": "solution"}
    cases = [
        ({"name": "x", "path": "y"}, "data"),
        ({"path": "a.csv", "columns": {"prompt": 3}}, "data.columns.prompt"),
        ({"path": "a.csv", "columns": {"prompt": "q", "answer": "q"}}, "data.columns"),
        ({"path": "a.csv", "config": "main"}, "data.config"),
        ({"path": "a.csv", "eval_path": "b.csv", "eval_split": "test"}, "data.eval_split"),
        ({"task": "arithmetic", "eval_split": "test"}, "data.eval_split"),
        ({"task": "arithmetic", "system_prompt": "x"}, "data.system_prompt"),
        ({"name": "x", "eval_split": "train"}, "data.eval_split"),
        ({"path": 3}, "data.path"),
    ]
    for data, field in cases:
        with pytest.raises(ConfigError) as info:
            RunConfig.from_dict({**base, "data": data})
        assert info.value.field == field, (data, info.value)


@pytest.mark.parametrize("mapped", [True, False])
def test_a_missing_prompt_column_names_the_setting_that_chose_it(mapped):
    """Rows without the prompt column: the error's field and fix name ``data.columns.prompt`` when a
    mapping chose the column (``set data.prompt_column`` would not help there), else ``data.prompt_column``."""
    rows = [{"question": "hello", "answer": "1"}]
    with pytest.raises(ConfigError) as info:
        load_dataset(rows=rows, columns={"prompt": "x"}) if mapped else load_dataset(rows=rows)
    err = info.value
    assert "has no column" in str(err) and "question" in str(err)
    if mapped:
        assert err.field == "data.columns.prompt" and "data.columns = {prompt = " in err.fix
        assert "data.prompt_column" not in err.fix
    else:
        assert err.field == "data.prompt_column" and "data.prompt_column" in err.fix


def test_in_memory_rows_are_unchanged():
    rows = [{"q": "hello", "answer": "1"}]
    assert load_dataset(rows=rows, columns={"prompt": "q"})[0] == {"q": "hello", "answer": "1", "prompt": "hello"}
    assert from_rows(rows, "q").fingerprint() == from_rows([dict(r) for r in rows], "q").fingerprint()


RECORDING_REWARD = """
import json, os

def seen(prompts, completions, answer, **kwargs):
    with open(os.environ["POLYRL_TEST_SEEN"], "a") as fh:
        for prompt, a in zip(prompts, answer):
            fh.write(json.dumps({"prompt": prompt, "answer": a}) + "\\n")
    return [0.5 for _ in completions]
"""


def test_trainer_on_parquet_with_mapping_system_prompt_and_eval_file(tiny_model_dir, tmp_path, monkeypatch):
    """The real trainer on the tiny model: mapped columns and the system prompt reach the engine and
    the rewards; evaluation reads the separate eval file; no memory-mapped dataset is ever turned
    into a list of every row (the trainer once did, at start and on each step)."""
    from polyrl.trainer import Trainer

    every_row = Dataset.rows.fget

    def refuse_materialising(dataset):
        assert not dataset.arrow_backed, "the trainer materialised every row of a memory-mapped dataset"
        return every_row(dataset)

    monkeypatch.setattr(Dataset, "rows", property(refuse_materialising))

    train_file = _write(tmp_path, TEXT_ROWS[:8], "train.parquet")
    eval_file = _write(tmp_path, TEXT_ROWS[8:], "eval.parquet")
    (tmp_path / "seen.py").write_text(RECORDING_REWARD)
    monkeypatch.setenv("POLYRL_TEST_SEEN", str(tmp_path / "seen.jsonl"))
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir, "max_length": 256},
        "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"path": str(train_file), "eval_path": str(eval_file), "cache_dir": str(tmp_path / "cache"),
                 "columns": {"prompt": "question", "answer": "solution"}, "system_prompt": "Be brief."},
        "rewards": [{"function": f"{tmp_path / 'seen.py'}:seen"}],
        "eval": {"count": 2, "reward": "numeric_match"},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "out")},
    })
    trainer = Trainer(config)
    assert trainer.dataset.arrow_backed and len(trainer.dataset) == 8  # nothing held out of train
    assert [r["answer"] for r in trainer.eval_dataset] == [r["solution"] for r in TEXT_ROWS[8:10]]
    summary = trainer.run(progress=False)
    assert summary["steps"] == 1 and "eval_before" in summary and "eval_after" in summary
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    questions = {r["question"]: r["solution"] for r in TEXT_ROWS[:8]}
    assert len(seen) == 4  # 2 prompts x group of 2
    for row in seen:
        system, user = row["prompt"]
        assert system == {"role": "system", "content": "Be brief."} and user["role"] == "user"
        assert questions[user["content"]] == row["answer"]


def test_a_file_rewritten_with_the_same_mtime_is_read_again(tmp_path, cache):
    """🤗 datasets keys its Arrow copy of a local file by path and mtime; polyrl keys it by content,
    so `cp -p` / `rsync -t` of new rows over old ones cannot serve the old rows."""
    import os

    path = _write(tmp_path, ROWS[:3], "d.parquet")
    before = os.stat(path)
    first = load_dataset(path=str(path), cache_dir=cache)
    assert first.rows == ROWS[:3]
    _write(tmp_path, ROWS[3:6], "d.parquet")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    second = load_dataset(path=str(path), cache_dir=cache)
    assert second.rows == ROWS[3:6] and second.fingerprint() != first.fingerprint()


def test_arrow_chat_roles_are_checked(tmp_path, cache):
    rows = [dict(r) for r in ROWS]
    rows[7] = {**rows[7], "prompt": [{"role": "system", "content": "s"}, {"role": "usr", "content": "hi"}]}
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(_write(tmp_path, rows, "roles.parquet")), cache_dir=cache)
    assert info.value.field == "data" and "row 7 of roles.parquet" in str(info.value) and "'usr'" in str(info.value)
    assert "did you mean 'user'" in info.value.fix


def test_a_csv_with_a_bom_keeps_its_first_column_name(tmp_path, cache):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfprompt,answer\nhi,1\n")
    assert load_dataset(path=str(path), cache_dir=cache).prompts() == ["hi"]


def test_arrow_rows_are_named_by_their_place_in_the_source(tmp_path, cache):
    from polyrl.data import check_prompt_lengths

    rows = [{"prompt": "short", "answer": "1"} for _ in range(12)]
    rows[9] = {"prompt": "long " * 50, "answer": "2"}
    path = _write(tmp_path, rows, "lens.parquet")
    for split in ("train", "eval"):
        ds = load_dataset(path=str(path), cache_dir=cache, options={"eval_count": 5, "seed": 2}, split=split)
        if any(len(p.split()) > 10 for p in ds.prompts()):
            with pytest.raises(ConfigError, match=r"row 9 of lens.parquet: the prompt has 50 tokens"):
                check_prompt_lengths(ds, lambda p: len(p.split()), 20)
            kept, dropped = check_prompt_lengths(ds, lambda p: len(p.split()), 20, drop=True)
            assert dropped == 1 and kept.arrow_backed and len(kept) == len(ds) - 1


def test_a_jsonl_file_with_an_old_macs_line_ends_is_read_as_datasets_reads_it(tmp_path, cache):
    """CR-only line ends (classic Mac OS, some exporters): 🤗 datasets reads the rows; they were
    refused as one line, "line 1 is not valid JSON (Extra data)". Each CR ends a line now, the rows
    typed as datasets types them, and an error names the line an editor shows."""
    lines = [json.dumps({"prompt": f"What is {i} + 1?", "answer": i + 1}) for i in range(3)]
    path = tmp_path / "mac.jsonl"
    path.write_bytes("\r".join(lines).encode() + b"\r")
    expected = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=cache).to_list()
    assert load_dataset(path=str(path), cache_dir=cache).rows == expected
    path.write_bytes("\r".join([lines[0], '{"prompt": "broken"', lines[2]]).encode())
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=cache)
    assert f"{path}:2 is not valid JSON" in str(err.value)


def test_a_carriage_return_ending_a_line_inside_a_jsonl_line_ends_a_row(tmp_path, cache):
    """A file of \\n line ends with a lone \\r ending a row inside one line (two files joined):
    read as 🤗 datasets reads it, three rows (it was refused, "Extra data"); a broken row there keeps
    the hint that the \\r is a line end."""
    path = tmp_path / "joined.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "b"}\r{"prompt": "c"}\n')
    assert load_dataset(path=str(path), cache_dir=cache).prompts() == ["a", "b", "c"]
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "b"}\r{"prompt": "c"\n')
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=cache)
    assert f"{path}:2 is not valid JSON" in str(err.value)
    assert "carriage return (\\r) as a line end" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("cell", ["NA", "N/A", "null", '"None"'])
def test_a_csv_prompt_pandas_reads_as_missing_is_said_to_be_so(tmp_path, cache, cell):
    """pandas (🤗 datasets' CSV reader) reads NA, N/A, null, None... as no value, quoted or not:
    the prompt was refused as "is empty", naming a cell that is not."""
    path = tmp_path / "qa.csv"
    path.write_text(f"prompt,answer\nWhat is 1 + 1?,2\n\n{cell},3\n")
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=cache)
    word = cell.strip('"')
    assert str(err.value).startswith(f"data: row 1 of qa.csv: the prompt in column 'prompt' holds {word!r}, which "
                                     "pandas (🤗 datasets' CSV reader) reads as a missing value"), str(err.value)
    assert "JSONL or Parquet" in str(err.value)
    path.write_text("prompt,answer\nWhat is 1 + 1?,2\n,3\n")  # a cell that is empty is still said so
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=cache)
    assert "the prompt in column 'prompt' is empty" in str(err.value)
