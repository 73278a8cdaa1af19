"""What a backend's hooks answer is checked where the core receives it: a wrong type, shape or dtype,
a load or a generation phase that raises, is one ``PluginError`` naming backend, distribution and
hook (one ``error:`` line in a run), never a numpy traceback far away or a silent misreading."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError, PluginError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.types import BackendSpec, Capabilities, Completion, EngineConfig, StepMetrics, TokenSequence, TrainBatch

#: what each hook answers, by the engine's "model" name
ANSWERS: dict[str, dict[str, object]] = {}


def _load(config: EngineConfig) -> str:
    if config.model == "load-raises":
        raise RuntimeError("libfoo.so: cannot open shared object file")
    if config.model == "load-exits":
        sys.exit(3)
    if config.model == "load-config-error":
        raise ConfigError("no such model", field="model.path", fix="point it at a model folder")
    return config.model


class _Answers:
    """A backend answering each hook with ``ANSWERS[engine][hook]`` (None: not answered)."""

    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="answers", load=_load, distribution="polyrl-answers",
                             capabilities=Capabilities(generate=True, train_step=True)))

    @hookimpl
    def encode_chat(self, engine, messages, tools, add_generation_prompt):
        return ANSWERS[engine].get("encode_chat")

    @hookimpl
    def logprobs(self, engine, sequences, temperature, reference):
        return ANSWERS[engine].get("logprobs")

    @hookimpl
    def entropies(self, engine, sequences, temperature):
        return ANSWERS[engine].get("entropies")

    @hookimpl
    def train_step(self, engine, batch, objective):
        return ANSWERS[engine].get("train_step")

    @hookimpl
    def export_weights(self, engine):
        return ANSWERS[engine].get("export_weights")

    @hookimpl
    def generate(self, engine, prompts, sampling):
        return ANSWERS[engine].get("generate")

    @hookimpl
    def generation_phase(self, engine):
        return ANSWERS[engine].get("generation_phase")


def _engine(name: str, **answers: object) -> Engine:
    ANSWERS[name] = answers
    return Engine(Registry(get_plugin_manager(extra=[_Answers()])), "answers", EngineConfig(model=name))


PREFIX = r"backend 'answers' \(polyrl-answers\) hook "
SEQS = [TokenSequence([1, 2], [3, 4, 5])]


def test_a_load_that_raises_names_the_plugin_and_a_config_error_stays_the_users():
    with pytest.raises(PluginError, match=PREFIX + "load: raised RuntimeError: libfoo.so"):
        _engine("load-raises")
    with pytest.raises(ConfigError, match="model.path: no such model"):
        _engine("load-config-error")


def test_a_load_calling_sys_exit_names_the_plugin_instead_of_ending_the_run():
    """``SystemExit`` is no ``Exception``: a load calling ``sys.exit(3)`` ended the run with code 3
    and no word (the compute hooks already reported it)."""
    with pytest.raises(PluginError, match=PREFIX + r"load: called sys.exit\(3\); load must raise an exception"):
        _engine("load-exits")


@pytest.mark.parametrize("answer, shown", [
    ({"input_ids": [1, 2, 3]}, "dict"),  # a tokenizer's BatchEncoding
    ("<|im_start|>user", "str"),
    (np.array([1.5, 2.0]), r"ndarray of shape \(2,\) and dtype float64"),
    (np.array([3, -1]), "ndarray"),
    (np.array([[1, 2], [3, 4]]), r"ndarray of shape \(2, 2\)"),
])
def test_encode_chat_answering_anything_but_token_ids_is_the_plugins_fault(answer, shown):
    engine = _engine("encode", encode_chat=answer)
    with pytest.raises(PluginError, match=PREFIX + f"encode_chat: returned {shown}.*expected a 1-D array of int"):
        engine.encode_chat([{"role": "user", "content": "hi"}])


def test_encode_chat_ids_as_a_list_or_one_row_are_read_as_ids():
    assert _engine("list", encode_chat=[5, 6, 7]).encode_chat([]).tolist() == [5, 6, 7]
    one_row = _engine("row", encode_chat=np.array([[5, 6]], np.int32)).encode_chat([])
    assert one_row.dtype == np.int64 and one_row.tolist() == [5, 6]


@pytest.mark.parametrize("answer, problem", [
    (3.0, "returned float, expected a list of float arrays"),
    ([["a", "b", "c"]], "array 0 is list, expected floats"),
    ([np.zeros((3, 8))], r"array 0 has shape \(3, 8\), expected \(3,\)"),
    ([np.zeros(2)], r"array 0 has shape \(2,\), expected \(3,\)"),
])
def test_logprobs_of_the_wrong_type_or_shape_is_the_plugins_fault(answer, problem):
    with pytest.raises(PluginError, match=PREFIX + "logprobs: " + problem):
        _engine("lp", logprobs=answer).logprobs(SEQS)


@pytest.mark.parametrize("answer, problem", [
    (3.0, "returned float, expected a list of float arrays"),
    ([np.zeros(3)] * 2, "returned 2 arrays for 1 sequences"),
    ([np.zeros(2)], r"array 0 has shape \(2,\), expected \(3,\)"),
    ([np.array([0.5, np.nan, 1.0])], "array 0 holds nan, expected finite entropies >= 0"),
    ([np.array([0.5, -0.5, 1.0])], "array 0 holds -0.5, expected finite entropies >= 0"),
])
def test_entropies_of_the_wrong_shape_or_value_are_the_plugins_fault(answer, problem):
    with pytest.raises(PluginError, match=PREFIX + "entropies: " + problem):
        _engine("ent", entropies=answer).entropies(SEQS)


def test_entropies_are_optional_and_a_rounding_below_zero_is_zero():
    assert _engine("no-ent").entropies(SEQS) is None
    got = _engine("round", entropies=[np.array([1.0, -1e-6, 0.0])]).entropies(SEQS)
    assert got is not None and got[0].tolist() == [1.0, 0.0, 0.0]


def test_train_step_missing_or_with_metrics_that_are_no_numbers_is_the_plugins_fault():
    batch = TrainBatch(SEQS, np.ones(1))
    with pytest.raises(PluginError, match=PREFIX + "train_step: returned None; the hook must return its answer"):
        _engine("no-train").train_step(batch, Objective())
    with pytest.raises(PluginError, match=PREFIX + "train_step: StepMetrics.loss is NoneType, expected a float"):
        _engine("none-loss", train_step=StepMetrics(loss=None, grad_norm=1.0)).train_step(batch, Objective())  # type: ignore[arg-type]
    with pytest.raises(PluginError, match=r"StepMetrics.grad_norm is ndarray of shape \(2,\)"):
        _engine("vec-norm", train_step=StepMetrics(loss=0.5, grad_norm=np.ones(2))).train_step(  # type: ignore[arg-type]
            batch, Objective())
    scalar = _engine("scalar", train_step=StepMetrics(loss=np.float32(0.5), grad_norm=np.array(2.0)))  # type: ignore[arg-type]
    got = scalar.train_step(batch, Objective())
    assert type(got.loss) is float and type(got.grad_norm) is float and got.grad_norm == 2.0


@pytest.mark.parametrize(("fields", "problem"), [
    ({"skipped": "no"}, r"StepMetrics.skipped is str 'no', expected a bool"),  # truthy: an applied update read as refused
    ({"skipped": None}, r"StepMetrics.skipped is NoneType None, expected a bool"),
    ({"tokens": "many"}, r"StepMetrics.tokens is str 'many', expected the int count"),
    ({"tokens": -3}, r"StepMetrics.tokens is int -3, expected the int count"),
    ({"tokens": 2.5}, r"StepMetrics.tokens is float 2.5, expected the int count"),
    ({"extra": None}, r"StepMetrics.extra is NoneType, expected a dict"),  # was a TypeError traceback in as_dict
    ({"extra": [1, 2]}, r"StepMetrics.extra is list, expected a dict"),
    ({"extra": {3: 1.0}}, r"StepMetrics.extra is dict, expected a dict of metric names \(str\)"),
])
def test_train_step_skipped_tokens_or_extra_of_the_wrong_type_is_the_plugins_fault(fields, problem):
    answer = StepMetrics(loss=0.5, grad_norm=1.0, tokens=3)
    for key, value in fields.items():
        setattr(answer, key, value)
    with pytest.raises(PluginError, match=PREFIX + "train_step: " + problem):
        _engine(f"step-{sorted(fields.items())!r}", train_step=answer).train_step(TrainBatch(SEQS, np.ones(1)), Objective())


def test_train_step_numpy_flags_and_whole_float_token_counts_are_read_as_python_values():
    answer = StepMetrics(loss=0.5, grad_norm=1.0, tokens=np.float64(3.0), skipped=np.bool_(False))  # type: ignore[arg-type]
    got = _engine("np-fields", train_step=answer).train_step(TrainBatch(SEQS, np.ones(1)), Objective())
    assert type(got.skipped) is bool and got.skipped is False and type(got.tokens) is int and got.tokens == 3


def test_export_weights_that_are_no_mapping_is_the_plugins_fault():
    with pytest.raises(PluginError, match=PREFIX + "export_weights: returned list, expected a dict"):
        _engine("weights", export_weights=[np.zeros(2)]).export_weights()


def test_a_completion_whose_text_is_no_string_is_the_plugins_fault():
    bad = Completion(0, [1], [2], [-0.5], text=None, finish_reason="stop")  # type: ignore[arg-type]
    from polyrl.types import SamplingParams

    with pytest.raises(PluginError, match=PREFIX + "generate: returned a completion with text NoneType"):
        _engine("text", generate=[bad]).generate(["hi"], SamplingParams(max_new_tokens=1))


class _Phase:
    def __init__(self, enter: Exception | None = None, leave: Exception | None = None, swallow: bool = False):
        self.enter, self.leave, self.swallow = enter, leave, swallow

    def __enter__(self):
        if self.enter:
            raise self.enter

    def __exit__(self, *exc):
        if self.leave:
            raise self.leave
        return self.swallow


def test_a_generation_phase_raising_on_entering_or_leaving_names_the_plugin():
    with pytest.raises(PluginError, match=PREFIX + "generation_phase: entering its context raised OSError: gather"):
        with _engine("enter", generation_phase=_Phase(enter=OSError("gather"))).generation_phase():
            pass
    with pytest.raises(PluginError, match=PREFIX + "generation_phase: leaving its context raised KeyError"):
        with _engine("leave", generation_phase=_Phase(leave=KeyError("shard"))).generation_phase():
            pass


def test_a_generation_phase_never_swallows_the_rollouts_error():
    """A phase whose ``__exit__`` answers True would leave the trainer with no completions."""
    with pytest.raises(ConfigError, match="model.max_length"):
        with _engine("swallow", generation_phase=_Phase(swallow=True)).generation_phase():
            raise ConfigError("prompt too long", field="model.max_length")


class _Bare:
    """A backend whose plugin implements no compute hook at all."""

    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="bare", load=lambda config: "bare", distribution="polyrl-bare",
                             capabilities=Capabilities(generate=True, train_step=True)))


def test_a_hook_the_plugin_lacks_is_told_apart_from_one_answering_none():
    bare = Engine(Registry(get_plugin_manager(extra=[_Answers(), _Bare()])), "bare", EngineConfig(model="bare"))
    with pytest.raises(PluginError, match=r"backend 'bare' \(polyrl-bare\) hook train_step: its plugin does not "
                                          "implement it"):
        bare.train_step(TrainBatch(SEQS, np.ones(1)), Objective())


def test_a_train_step_reporting_a_non_finite_step_as_taken_is_the_plugins_fault():
    batch = TrainBatch(SEQS, np.ones(1))
    with pytest.raises(PluginError, match=PREFIX + "train_step: reported loss nan and grad_norm 1.0 with skipped=False"):
        _engine("nan-step", train_step=StepMetrics(loss=float("nan"), grad_norm=1.0)).train_step(batch, Objective())
    skipped = _engine("nan-skip", train_step=StepMetrics(loss=float("nan"), grad_norm=float("nan"), skipped=True))
    assert skipped.train_step(batch, Objective()).skipped


def test_logprobs_that_are_no_distributions_are_the_plugins_fault():
    with pytest.raises(PluginError, match=PREFIX + r"logprobs: array 0 has log-prob 0.7 > 0 \(a probability above 1\)"):
        _engine("lp-values", logprobs=[np.array([-0.1, 0.7, -0.2])]).logprobs(SEQS)
    assert _engine("lp-rounded", logprobs=[np.array([-0.1, 1e-6, 0.0])]).logprobs(SEQS)[0][1] == np.float32(1e-6)


@pytest.mark.parametrize("ids, logprobs, problem", [
    ([3, 2], [-0.5, 0.7], r"completion 0 has log-prob 0.7 > 0"),
    ([3, 12], [-0.5, -0.1], r"completion 0 has token id 12, outside the model's vocabulary \(0 to 9\)"),
    ([3, -1], [-0.5, -0.1], r"completion 0 has token id -1, outside the model's vocabulary"),
])
def test_sampled_ids_and_logprobs_are_checked_where_generate_answers(tmp_path, ids, logprobs, problem):
    from polyrl.types import SamplingParams

    (tmp_path / "config.json").write_text('{"vocab_size": 10}')
    ANSWERS[str(tmp_path)] = {"generate": [Completion(0, [1], np.array(ids), np.array(logprobs), finish_reason="stop")]}
    engine = Engine(Registry(get_plugin_manager(extra=[_Answers()])), "answers", EngineConfig(model=str(tmp_path)))
    with pytest.raises(PluginError, match=PREFIX + "generate: " + problem):
        engine.generate(["hi"], SamplingParams(max_new_tokens=2))


@pytest.mark.parametrize("prompt_ids, problem", [
    ([], r"completion 0 has no prompt_ids; generate must return the ids of the prompt"),  # was accepted
    ([1, 10], r"completion 0 has prompt token id 10, outside the model's vocabulary \(0 to 9\)"),
    ([-2, 1], r"completion 0 has prompt token id -2, outside the model's vocabulary"),
])
def test_prompt_ids_that_are_empty_or_past_the_vocabulary_are_the_plugins_fault(tmp_path, prompt_ids, problem):
    """An empty ``prompt_ids`` left logprobs and train_step no position to score the first sampled
    token from (the max backend then blamed the user's "sequences"); a prompt id past the
    vocabulary failed inside train_step, blaming the trainer's backend."""
    from polyrl.types import SamplingParams

    (tmp_path / "config.json").write_text('{"vocab_size": 10}')
    ANSWERS[str(tmp_path)] = {"generate": [Completion(0, prompt_ids, [3], [-0.5], finish_reason="stop")]}
    engine = Engine(Registry(get_plugin_manager(extra=[_Answers()])), "answers", EngineConfig(model=str(tmp_path)))
    with pytest.raises(PluginError, match=PREFIX + "generate: " + problem):
        engine.generate(["hi"], SamplingParams(max_new_tokens=2))


class _Builds(_Answers):
    """A backend building its Completion inside ``generate``, from ``ANSWERS[engine]["ids"]``."""

    @hookimpl
    def generate(self, engine, prompts, sampling):
        ids = ANSWERS[engine]["ids"]
        return [Completion(0, [1], ids, [-0.5] * len(ids), finish_reason="stop")]


@pytest.mark.parametrize("ids, problem", [
    ([3, 3.7], r"completion_ids holds 3.7 at position 1, not an integer token id"),  # was token 3
    (np.array([3.0, np.nan]), r"completion_ids holds nan at position 1, not an integer token id"),
    (np.array([3.0, np.inf]), r"completion_ids holds inf at position 1"),
    (np.array([True, False]), r"completion_ids are booleans, not integer token ids"),  # was tokens 1, 0
    (["3", "4"], r"completion_ids are an array of dtype <U1, not integer token ids"),  # was tokens 3, 4
    (np.array([3, 0.5], dtype=object), r"completion_ids holds 0.5 at position 1"),
])
def test_sampled_ids_that_are_no_integers_are_the_plugins_fault_not_rounded(ids, problem):
    from polyrl.types import SamplingParams

    ANSWERS["float-ids"] = {"ids": ids}
    engine = Engine(Registry(get_plugin_manager(extra=[_Builds()])), "answers", EngineConfig(model="float-ids"))
    with pytest.raises(PluginError, match=PREFIX + "generate: raised ValueError: " + problem):
        engine.generate(["hi"], SamplingParams(max_new_tokens=2))


@pytest.mark.parametrize("ids", [np.array([3, 4], dtype=np.int32), np.array([3, 4], dtype=np.uint16),
                                 np.array([3.0, 4.0]), [np.int64(3), 4], np.array([3, 4.0], dtype=object)])
def test_integer_ids_of_any_integer_or_integral_float_type_are_read_as_they_always_were(ids):
    from polyrl.types import SamplingParams

    ANSWERS["int-ids"] = {"ids": ids}
    engine = Engine(Registry(get_plugin_manager(extra=[_Builds()])), "answers", EngineConfig(model="int-ids"))
    (out,) = engine.generate(["hi"], SamplingParams(max_new_tokens=2))
    assert out.completion_ids.dtype == np.int64 and out.completion_ids.tolist() == [3, 4]


def test_token_prompts_and_sequences_refuse_ids_that_are_no_integers_too():
    from polyrl.types import TokenPrompt

    with pytest.raises(ValueError, match=r"TokenPrompt.ids holds 1.5 at position 0"):
        TokenPrompt([1.5])
    with pytest.raises(ValueError, match=r"prompt_ids are booleans"):
        TokenSequence([True], [3])
    assert TokenSequence(np.array([1.0]), [3]).prompt_ids.tolist() == [1]


def test_a_wrong_length_of_sampled_logprobs_is_the_plugins_fault():
    from polyrl.types import SamplingParams

    bad = Completion(0, [1], [3, 4], [-0.5, -0.1], finish_reason="stop")
    bad.logprobs = np.array([-0.5])  # changed after construction: Completion checks its own lengths
    with pytest.raises(PluginError, match=PREFIX + r"generate: completion 0 has log-probs of shape \(1,\) for 2 tokens"):
        _engine("gen-len", generate=[bad]).generate(["hi"], SamplingParams(max_new_tokens=2))


class _Exits(_Answers):
    @hookimpl
    def generate(self, engine, prompts, sampling):
        raise SystemExit(4)


def test_sys_exit_in_a_hook_is_the_plugins_fault_not_a_silent_exit():
    from polyrl.types import SamplingParams

    ANSWERS["exits"] = {}
    engine = Engine(Registry(get_plugin_manager(extra=[_Exits()])), "answers", EngineConfig(model="exits"))
    with pytest.raises(PluginError, match=PREFIX + r"generate: called sys.exit\(4\); a hook must raise"):
        engine.generate(["hi"], SamplingParams(max_new_tokens=1))


@pytest.mark.parametrize("value", [np.nan, -np.inf])
def test_non_finite_logprobs_stop_the_run_naming_the_likely_cause(tmp_path, value):
    """Non-finite weights (lr too high) give them from a correct backend: not the plugin's fault."""
    from polyrl.errors import NonFiniteModel
    from polyrl.types import SamplingParams

    sampled = Completion(0, [1], [3, 2], np.array([-0.5, value]), finish_reason="stop")
    with pytest.raises(NonFiniteModel, match=r"hook generate answered a non-finite log-prob.*Fix: lower optimizer.lr"):
        _engine(f"gen-{value}", generate=[sampled]).generate(["hi"], SamplingParams(max_new_tokens=2))
    with pytest.raises(NonFiniteModel, match=r"hook logprobs \(reference\) answered a non-finite log-prob"):
        _engine(f"lp-{value}", logprobs=[np.array([-0.1, value, -0.2])]).logprobs(SEQS, reference=True)


def test_a_completion_longer_than_max_new_tokens_is_the_plugins_fault_not_trained_on():
    from polyrl.types import SamplingParams

    long = Completion(0, [1], [3, 4, 5, 6], [-0.5] * 4, finish_reason="length")  # a backend ignoring the limit
    with pytest.raises(PluginError, match=PREFIX + r"generate: completion 0 has 4 tokens, more than "
                                                   r"sampling.max_new_tokens = 2"):
        _engine("gen-long", generate=[long]).generate(["hi"], SamplingParams(max_new_tokens=2))
    (ok,) = _engine("gen-full", generate=[Completion(0, [1], [3, 4], [-0.5] * 2)]).generate(
        ["hi"], SamplingParams(max_new_tokens=2))
    assert ok.completion_ids.tolist() == [3, 4]


@pytest.mark.parametrize("index, shown", [(0.0, r"0.0 \(float\)"), (False, r"False \(bool\)")])
def test_a_prompt_index_that_is_no_int_is_the_plugins_fault_not_a_traceback(index, shown):
    from polyrl.types import SamplingParams

    bad = Completion(index, [1], [3], [-0.5], finish_reason="stop")  # type: ignore[arg-type]
    with pytest.raises(PluginError, match=PREFIX + r"generate: completion 0 has prompt_index " + shown
                                          + ", expected an int"):
        _engine("gen-index", generate=[bad]).generate(["hi"], SamplingParams(max_new_tokens=1))
    (ok,) = _engine("gen-np-index", generate=[Completion(np.int64(0), [1], [3], [-0.5])]).generate(  # type: ignore[arg-type]
        ["hi"], SamplingParams(max_new_tokens=1))
    assert type(ok.prompt_index) is int


def test_train_step_extra_naming_a_field_of_its_own_is_the_plugins_fault_not_the_logged_value():
    answer = StepMetrics(loss=float("nan"), grad_norm=1.0, tokens=3, skipped=True, extra={"skipped": False, "loss": 0.1})
    # as_dict let extra win: a refused step was logged as applied, with a loss it never had
    with pytest.raises(PluginError, match=PREFIX + r"train_step: StepMetrics.extra holds 'loss', 'skipped', a field "
                                                   r"of StepMetrics itself.*Fix: set the field"):
        _engine("step-extra-fields", train_step=answer).train_step(TrainBatch(SEQS, np.ones(1)), Objective())
    ok = StepMetrics(loss=0.5, grad_norm=1.0, tokens=3, extra={"lr": 1e-5, "clip_low_fraction": 0.0})
    assert _engine("step-extra-ok", train_step=ok).train_step(TrainBatch(SEQS, np.ones(1)), Objective()).extra["lr"] == 1e-5


@pytest.mark.parametrize("fields, named", [
    ({"mask": [False]}, "mask"),  # read as an episode whose one token the model never sampled: nothing trained
    ({"info": {"env_reward": 1.0}}, "info"),  # scored as an environment's reward
    ({"reasoning_open": True, "messages": [{"role": "assistant", "content": "x"}]}, "messages, reasoning_open"),
])
def test_a_completion_setting_the_fields_only_the_core_sets_is_the_plugins_fault(fields, named):
    from polyrl.types import SamplingParams

    bad = Completion(0, [1], [3], [-0.5], finish_reason="stop", **fields)
    with pytest.raises(PluginError, match=PREFIX + f"generate: completion 0 sets {named}, which only the core sets"):
        _engine("gen-core-fields", generate=[bad]).generate(["hi"], SamplingParams(max_new_tokens=1))
