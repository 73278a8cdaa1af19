"""A tokenizer with a ``response_schema``: TRL 1.16 parses each chat completion with it before the
reward functions see it (``trl.chat_template_utils.parse_response``: ``thinking`` and
``tool_calls`` split out of ``content``); polyrl passed the decoded text as ``content``, so a
reward scoring ``completion[0]["content"]`` scored the thinking too. TRL's own function is the
oracle here."""

from __future__ import annotations

import copy
import importlib.util
import shutil

import pytest

pytest.importorskip("polyrl_torch")
pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")

from trl.chat_template_utils import parse_response, qwen3_schema  # noqa: E402

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.rewards.functions import FunctionReward  # noqa: E402
from polyrl.types import Completion, RewardContext  # noqa: E402

TEXTS = [
    "<think>\n2 and 2 make 4\n</think>\n\nThe answer is 4<|im_end|>",
    'Calling.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call><|im_end|>',
    '<tool_call>\n{"arguments": {"a": 2}}\n</tool_call><|im_end|>',  # no name: TRL falls back to the text
    "plain answer, cut short",
]


def _without_jmespath(schema):
    """TRL's Qwen3 schema whose tool calls are read as the JSON they are (no jmespath transform)."""
    schema = copy.deepcopy(schema)
    del schema["properties"]["tool_calls"]["items"]["x-parser-args"]
    return schema


@pytest.fixture
def schema_tokenizer(tiny_model_dir):
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.response_schema = _without_jmespath(qwen3_schema)
    return tok


def test_completions_are_parsed_as_trls_parse_response_parses_them(schema_tokenizer):
    from polyrl.trl_responses import response_parser

    parse = response_parser(schema_tokenizer)
    assert parse is not None
    for text in TEXTS:
        ids = schema_tokenizer(text, add_special_tokens=False)["input_ids"]
        assert parse(ids) == parse_response(schema_tokenizer, ids), text
    first = parse(schema_tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"])
    assert first["content"] == "The answer is 4" and "2 and 2 make 4" in first["reasoning_content"]
    schema_tokenizer.response_schema = None
    assert response_parser(schema_tokenizer) is None  # no schema: TRL decodes the text, as polyrl does


def test_a_reward_function_gets_the_parsed_message_for_a_chat_prompt_only(schema_tokenizer):
    from polyrl.trl_responses import response_parser

    seen = []

    def reward(completions, **kwargs):
        seen.append(completions)
        return [0.0] * len(completions)

    plugin = FunctionReward(reward)
    plugin.parse_completion = response_parser(schema_tokenizer)
    ids = schema_tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"]
    chat, text = [{"role": "user", "content": "2 + 2?"}], "2 + 2?"
    for prompt in (chat, text):
        completion = Completion(0, [1], ids, [0.0] * len(ids), text=schema_tokenizer.decode(ids))
        plugin.reward([prompt], [completion], RewardContext(rows=[{"prompt": prompt}], wanted=(plugin.name,)))
    assert seen[0] == [[parse_response(schema_tokenizer, ids)]]
    assert seen[1] == [schema_tokenizer.decode(ids)]  # a text prompt's completion: the text, as in TRL


def test_the_trl_trainer_hands_the_parser_to_its_reward_computers_which_parse_each_completion_once(
        tiny_model_dir, schema_tokenizer, tmp_path, monkeypatch):
    """The run polyrl.trl builds (nothing trained: its Trainer stood in for, holding real reward
    computers) hands the parser of the processing_class given, or of the model folder's saved
    tokenizer, to its reward computers, the one owner: it was handed to each reward function too,
    whose own parse a computer never reaches. Counted: one parse per chat completion a call scores."""
    import datasets

    import polyrl.trainer
    import polyrl.trl_responses
    from polyrl.trl import GRPOTrainer
    from trl_util import grpo_args

    calls: list[list[int]] = []
    real_parser = polyrl.trl_responses.response_parser

    def counted_parser(tokenizer):
        parse = real_parser(tokenizer)
        if parse is None:
            return None

        def counted(ids):
            calls.append(list(ids))
            return parse(ids)
        return counted

    monkeypatch.setattr(polyrl.trl_responses, "response_parser", counted_parser)
    seen: list = []

    def reading(completions, answer, **kwargs):
        seen.append(copy.deepcopy(completions))
        return [0.0] * len(completions)

    built: list = []

    class Captured:
        def __init__(self, config, extra_plugins=()):
            built.append(extra_plugins)
            functions = [p for p in extra_plugins if isinstance(p, FunctionReward)]
            self.rewards, self._eval_rewards = _computer(*functions), _computer(*functions)

    monkeypatch.setattr(polyrl.trainer, "Trainer", Captured)
    rows = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"{i} + 1?"}], "answer": "1"}
                                       for i in range(4)])
    ids = [schema_tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    chat = [{"role": "user", "content": "2 + 2?"}]
    folder = tmp_path / "with_schema"
    shutil.copytree(tiny_model_dir, folder)
    schema_tokenizer.save_pretrained(folder)  # the schema in the folder's tokenizer files
    for model, given in ((tiny_model_dir, schema_tokenizer), (tiny_model_dir, None), (folder, None)):
        trainer = GRPOTrainer(model=model, reward_funcs=[reading], args=grpo_args(tmp_path / str(len(built))),
                              train_dataset=rows, processing_class=given)
        made = trainer._polyrl_trainer(trainer.policy, trainer.grpo_config, None)
        functions = [p for p in built[-1] if isinstance(p, FunctionReward)]
        assert len(functions) == 1 and functions[0].parse_completion is None  # the computers' alone
        schema = not (model == tiny_model_dir and given is None)  # the tiny folder's tokenizer has none
        for computer in (made.rewards, made._eval_rewards):
            assert (computer.parse_completion is not None) == schema
            calls.clear()
            seen.clear()
            completions = [Completion(0, [1], x, [0.0] * len(x), text=schema_tokenizer.decode(x)) for x in ids]
            computer([chat] * len(ids), completions,
                     RewardContext(rows=[{"answer": "1"}] * len(ids), wanted=(functions[0].name,)))
            assert calls == (ids if schema else [])  # once each
            texts = [schema_tokenizer.decode(x) for x in ids]
            assert seen == [[[parse_response(schema_tokenizer, x)] for x in ids] if schema
                            else [[{"role": "assistant", "content": t}] for t in texts]]


def test_a_schema_needing_jmespath_without_it_is_refused_when_the_run_is_built(schema_tokenizer):
    """transformers' parse raises ImportError without jmespath for a schema that transforms (TRL's
    Qwen3 one), which TRL lets through at the first completion: refused before any model loads."""
    from polyrl.trl_responses import response_parser

    schema_tokenizer.response_schema = qwen3_schema
    if importlib.util.find_spec("jmespath") is not None:
        ids = schema_tokenizer(TEXTS[1], add_special_tokens=False)["input_ids"]
        assert response_parser(schema_tokenizer)(ids) == parse_response(schema_tokenizer, ids)
        return
    with pytest.raises(ConfigError, match="transforms what it parses with jmespath, which is not installed") as info:
        response_parser(schema_tokenizer)
    assert info.value.field == "processing_class" and "pip install jmespath" in info.value.fix


def _computer(*plugins, rewards=None):
    from polyrl.plugins import get_plugin_manager
    from polyrl.rewards.combine import RewardComputer

    pm = get_plugin_manager(extra=list(plugins), entry_points=False)
    return RewardComputer(pm, rewards or [(p.name, 1.0, {}) for p in plugins])


def test_each_completion_is_parsed_once_for_every_reward_and_an_edit_stays_in_its_function(schema_tokenizer):
    """TRL's ``_generate`` parses each chat completion once and hands the same list to every reward
    function; polyrl's ``RewardComputer`` parses once per call too (each function parsed it again),
    and each function gets its own copy of the one parse, so a function editing its completions
    in place (TRL's would change the next function's) changes nothing another reads."""
    from polyrl.rewards.functions import function_reward_plugin
    from polyrl.trl_responses import response_parser

    parse = response_parser(schema_tokenizer)
    calls = []

    def counted(ids):
        calls.append(list(ids))
        return parse(ids)

    seen = {}

    def editing(completions, **kwargs):
        seen["editing"] = copy.deepcopy(completions)
        for c in completions:
            c[0]["content"] = "edited"
        return [1.0] * len(completions)

    def reading(completions, **kwargs):
        seen["reading"] = copy.deepcopy(completions)
        return [0.0] * len(completions)

    computer = _computer(function_reward_plugin(editing), function_reward_plugin(reading))
    computer.parse_completion = counted
    chat = [{"role": "user", "content": "2 + 2?"}]
    ids = [schema_tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    completions = [Completion(0, [1], x, [0.0] * len(x), text=schema_tokenizer.decode(x)) for x in ids]
    computer([chat] * len(ids), completions, RewardContext(rows=[{}] * len(ids), wanted=("editing", "reading")))
    assert calls == ids  # once each, for both functions
    expected = [[parse_response(schema_tokenizer, x)] for x in ids]
    assert seen["editing"] == expected and seen["reading"] == expected
    assert all(c.messages is None for c in completions)  # the run's own completions are left as they were


def test_a_reward_model_scores_the_parsed_message_as_trl_renders_it(schema_tokenizer, tiny_model_dir):
    """TRL's reward model scores ``apply_chat_template({"messages": prompt + completion})`` where
    ``completion`` is the parsed message: the thinking and tool calls out of ``content``, rendered
    (or not) as the reward model's template renders those keys. polyrl's scored the decoded text as
    ``content``, ``<think>...</think>`` included, unsaid."""
    from trl.data_utils import apply_chat_template

    from polyrl.backend_kit.reward_text import render_pair, reward_answer
    from polyrl.hookspecs import hookimpl
    from polyrl.trl_responses import response_parser

    reward_tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    rendered = []

    class RewardModel:  # a reward model plugin's hook, as polyrl_torch's: reward_answer over score_texts
        __name__ = "stand-in-reward-model"

        @hookimpl
        def polyrl_register_rewards(self, register):
            from polyrl.types import RewardSpec

            register(RewardSpec(name="rm", summary="stand-in", distribution="tests"))

        @hookimpl
        def reward(self, prompts, completions, context):
            def score_texts(prompts, texts, options):
                rendered.extend(render_pair(reward_tokenizer, p, t, "auto") for p, t in zip(prompts, texts))
                return [0.0] * len(texts)
            return reward_answer("rm", score_texts, prompts, completions, context)

    computer = _computer(RewardModel(), rewards=[("rm", 1.0, {})])
    computer.parse_completion = response_parser(schema_tokenizer)
    chat = [{"role": "user", "content": "2 + 2?"}]
    ids = schema_tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"]
    completion = Completion(0, [1], ids, [0.0] * len(ids), text=schema_tokenizer.decode(ids, skip_special_tokens=True))
    computer([chat], [completion], RewardContext(rows=[{}], wanted=("rm",)))
    trl_text = apply_chat_template({"messages": chat + [parse_response(schema_tokenizer, ids)]}, reward_tokenizer)["text"]
    assert rendered == [trl_text]
    assert "2 and 2 make 4" not in trl_text  # the thinking is out of what this template renders


def test_polyrl_builtins_score_the_same_with_or_without_a_response_schema(schema_tokenizer):
    """The parse is what TRL hands reward functions and reward models; it was set as the
    completion's ``messages``, which polyrl's builtins read as an episode's turns, so
    length_penalty's "chars" counted the parsed ``content`` alone (no thinking, no tool calls)
    once the tokenizer had a schema. The builtins now score the text either way, and a function
    reward in the same call still gets the parsed message."""
    from polyrl.rewards.functions import function_reward_plugin
    from polyrl.trl_responses import response_parser

    seen = {}

    def reading(completions, **kwargs):
        seen["reading"] = copy.deepcopy(completions)
        return [0.0] * len(completions)

    chat = [{"role": "user", "content": "2 + 2?"}]
    ids = [schema_tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    texts = [schema_tokenizer.decode(x, skip_special_tokens=True) for x in ids]
    completions = [Completion(0, [1], x, [0.0] * len(x), text=t) for x, t in zip(ids, texts)]
    rewards = [("length_penalty", 1.0, {"target": 1, "unit": "chars"}), ("reading", 1.0, {})]
    scores = []
    for parse in (None, response_parser(schema_tokenizer)):
        computer = _computer(function_reward_plugin(reading), rewards=rewards)
        computer.parse_completion = parse
        result = computer([chat] * len(ids), completions,
                          RewardContext(rows=[{}] * len(ids), wanted=("length_penalty", "reading")))
        scores.append(result.per_reward["length_penalty"].tolist())
    assert scores[0] == scores[1]
    assert scores[0] == [-float(len(t) - 1) for t in texts]  # past the target: one per character
    assert seen["reading"] == [[parse_response(schema_tokenizer, x)] for x in ids]
