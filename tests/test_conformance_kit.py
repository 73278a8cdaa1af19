"""The conformance kit catches broken backends: the toy backend passes its checks, and the same
backend with one known fault (a wrong gradient, a wrong weight import, a checkpoint without
optimizer state, a step that applies NaN) fails the check meant for it.

The checks run programmatically (plain method calls), as a backend author's CI could.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys

import attrs
import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.errors import PluginError
from polyrl.hookspecs import hookimpl
from polyrl.testing.conformance import BackendConformance

from toy_dist import activate, install_toy_dists

pytestmark = pytest.mark.faults

MODEL = "unused"  # the toy backend ignores its model path


@pytest.fixture(scope="module")
def toy_module(tmp_path_factory):
    deactivate = activate(install_toy_dists(tmp_path_factory.mktemp("toy")))
    import polyrl_toy

    yield polyrl_toy
    deactivate()


def kit_for(plugin) -> BackendConformance:
    """A kit instance for ``plugin`` (a ToyPlugin subclass), as a pytest class would make one."""
    kit_class = type(f"Kit_{type(plugin).__name__}", (BackendConformance,),
                     {"backend": plugin.name, "plugins": (plugin,)})
    return kit_class()


def _gradient_checks(kit):
    for objective in (Objective(), Objective(beta=0.1, kl_estimator="k3", dual_clip=3.0,
                                             loss_aggregation="token_mean")):
        kit.test_gradient_equals_reference_gradient(MODEL, objective)


def test_the_correct_toy_backend_passes_the_checks(toy_module, tmp_path):
    kit = kit_for(toy_module.ToyPlugin("toy-good"))
    _gradient_checks(kit)
    kit.test_every_weight_survives_export_and_import(MODEL)
    kit.test_checkpoint_resumes_exactly(MODEL, tmp_path)
    kit.test_non_finite_step_is_skipped_and_leaves_the_weights(MODEL)
    kit.test_positive_advantage_raises_logprob(MODEL)
    kit.test_reported_loss_equals_reference(MODEL, Objective(beta=0.1, kl_estimator="k1"))
    for objective in (Objective(), Objective(loss_aggregation="token_mean")):
        kit.test_loss_divides_by_the_batch_normaliser(MODEL, objective)
    kit.test_loss_divides_by_a_fractional_token_normaliser(MODEL)
    _rule_checks(kit)


def test_kit_catches_a_backend_dividing_by_the_rows_it_trains(toy_module):
    """A backend that ignores ``TrainBatch.normaliser_sequences``/``normaliser_tokens`` scales the
    step by kept/counted rows (the trainer leaves truncated and unscorable rows out; TRL counts them)."""
    class IgnoresNormaliser(toy_module.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            return toy_module.train_step(
                engine, attrs.evolve(batch, normaliser_sequences=None, normaliser_tokens=None), objective)

    kit = kit_for(IgnoresNormaliser("toy-ignoresnormaliser"))
    for objective in (Objective(), Objective(loss_aggregation="token_mean")):
        with pytest.raises(AssertionError, match="loss_counts"):
            kit.test_loss_divides_by_the_batch_normaliser(MODEL, objective)


@pytest.mark.parametrize("cast", [int, round])
def test_kit_catches_a_backend_casting_the_token_normaliser_to_a_whole_number(toy_module, cast):
    """``normaliser_tokens`` is fractional for a ``token_mean`` mini-batch (its share of the
    step's tokens); a backend casting it passes the integer-count check and trains at a wrong
    loss scale, so the kit checks a fraction too."""
    class CastsNormaliser(toy_module.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            whole = None if batch.normaliser_tokens is None else cast(batch.normaliser_tokens)
            return toy_module.train_step(engine, attrs.evolve(batch, normaliser_tokens=whole), objective)

    kit = kit_for(CastsNormaliser(f"toy-casts{cast.__name__}"))
    kit.test_loss_divides_by_the_batch_normaliser(MODEL, Objective(loss_aggregation="token_mean"))  # passes
    with pytest.raises(AssertionError, match="fractional TrainBatch.normaliser_tokens"):
        kit.test_loss_divides_by_a_fractional_token_normaliser(MODEL)


def _rule_checks(kit):
    """The checks of temperature, the reference, the schedule and clipping (the toy starts
    uniform, where only the training-side temperature check can tell)."""
    kit.test_train_step_scores_at_the_batch_temperature(MODEL)
    kit.test_reference_logprobs_are_the_initial_policy_or_none(MODEL)
    kit.test_learning_rate_follows_the_schedule(MODEL)
    kit.test_gradient_is_clipped_to_max_grad_norm(MODEL)


def test_kit_catches_backends_that_break_the_stated_rules(toy_module):
    """Each variant broke one rule the hookspec states and passed every check before (a
    third-party author's review): ignoring temperature everywhere, training at temperature 1,
    answering reference=True with the current policy, a constant lr, no clipping."""
    toy = toy_module

    class IgnoresTemperature(toy.ToyPlugin):
        @hookimpl
        def generate(self, engine, prompts, sampling):
            return toy.generate(engine, prompts, attrs.evolve(sampling, temperature=1.0 if sampling.temperature else 0.0))

        @hookimpl
        def logprobs(self, engine, sequences, temperature, reference):
            return toy.logprobs(engine, sequences, 1.0, reference)

        @hookimpl
        def train_step(self, engine, batch, objective):
            return toy.train_step(engine, attrs.evolve(batch, temperature=1.0), objective)

    class TrainsAtTemperatureOne(toy.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            return toy.train_step(engine, attrs.evolve(batch, temperature=1.0), objective)

    class CurrentPolicyAsReference(toy.ToyPlugin):
        @hookimpl
        def logprobs(self, engine, sequences, temperature, reference):
            return toy.logprobs(engine, sequences, temperature, False)

    class ConstantLr(toy.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            opt = engine.config.optimizer
            engine.config = attrs.evolve(engine.config, optimizer=attrs.evolve(opt, warmup_steps=0, schedule="constant"))
            try:
                metrics = toy.train_step(engine, batch, objective)
            finally:
                engine.config = attrs.evolve(engine.config, optimizer=opt)
            metrics.extra["lr"] = toy.lr_at(opt, engine.t - 1)  # reported right, applied wrong
            return metrics

    class NeverClips(toy.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            opt = engine.config.optimizer
            engine.config = attrs.evolve(engine.config, optimizer=attrs.evolve(opt, max_grad_norm=None))
            try:
                return toy.train_step(engine, batch, objective)
            finally:
                engine.config = attrs.evolve(engine.config, optimizer=opt)

    caught = {}
    for variant, check in ((IgnoresTemperature, "temperature is ignored"),
                           (TrainsAtTemperatureOne, "batch's temperature"),
                           (CurrentPolicyAsReference, "reference=True"),
                           (ConstantLr, "update"),  # the warmup's lr-0 update moved, or the next one
                           (NeverClips, "not clipped")):
        with pytest.raises(AssertionError) as info:
            _rule_checks(kit_for(variant(f"toy-{variant.__name__.lower()}")))
        caught[variant.__name__] = check in str(info.value)
    assert all(caught.values()), caught


def test_kit_catches_a_wrong_gradient(toy_module):
    class HalfGradientOnNegativeAdvantages(toy_module.ToyPlugin):
        """Reports the right loss, but its gradient halves the push-down of bad completions."""

        @hookimpl
        def train_step(self, engine, batch, objective):
            from polyrl.algorithms.reference import policy_loss

            true_loss, _ = policy_loss([engine.logp(1.0)[s.completion_ids] for s in batch.sequences],
                                       batch.advantages, objective, batch.old_logprobs, batch.ref_logprobs)
            adv = np.where(batch.advantages < 0, batch.advantages * 0.5, batch.advantages)
            metrics = toy_module.train_step(engine, type(batch)(batch.sequences, adv, batch.old_logprobs,
                                                                batch.ref_logprobs), objective)
            metrics.loss = true_loss  # the reported loss stays plausible; only the gradient is off
            return metrics

    kit = kit_for(HalfGradientOnNegativeAdvantages("toy-halfgrad"))
    with pytest.raises(AssertionError, match="gradient"):
        _gradient_checks(kit)


def test_kit_catches_a_gradient_whose_norm_is_misreported(toy_module):
    class DoubleNorm(toy_module.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            metrics = toy_module.train_step(engine, batch, objective)
            metrics.grad_norm *= 2
            return metrics

    with pytest.raises(AssertionError):
        _gradient_checks(kit_for(DoubleNorm("toy-doublenorm")))


def test_kit_catches_a_wrong_weight_import(toy_module):
    class ImportsReversed(toy_module.ToyPlugin):
        @hookimpl
        def import_weights(self, engine, weights):
            engine.logits = np.asarray(weights["logits"], dtype=np.float64)[::-1].copy()
            return True

    with pytest.raises(AssertionError, match="logits"):
        kit_for(ImportsReversed("toy-reversed")).test_every_weight_survives_export_and_import(MODEL)


def test_kit_catches_a_checkpoint_without_optimizer_state(toy_module, tmp_path):
    class ForgetsAdamState(toy_module.ToyPlugin):
        @hookimpl
        def load_checkpoint(self, engine, path, state_path, weights_only):
            return toy_module.load_checkpoint(engine, path, state_path, weights_only=True)

    with pytest.raises(AssertionError, match="optimizer state not restored"):
        kit_for(ForgetsAdamState("toy-forgetful")).test_checkpoint_resumes_exactly(MODEL, tmp_path)


def test_kit_catches_a_checkpoint_of_stale_weights(toy_module, tmp_path):
    class SavesZeros(toy_module.ToyPlugin):
        @hookimpl
        def save_checkpoint(self, engine, path, state_path):
            kept, engine.logits = engine.logits, np.zeros_like(engine.logits)
            try:
                return toy_module.save_checkpoint(engine, path, state_path)
            finally:
                engine.logits = kept

    with pytest.raises(AssertionError, match="weights not restored"):
        kit_for(SavesZeros("toy-stale")).test_checkpoint_resumes_exactly(MODEL, tmp_path)


def test_kit_catches_a_step_that_applies_a_nan_update(toy_module):
    class AppliesNaN(toy_module.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            metrics = toy_module.train_step(engine, batch, objective)
            if metrics.skipped:
                engine.logits = engine.logits + np.nan
                metrics.skipped = False
            return metrics

    # the engine refuses the non-finite step reported as taken before the kit's own assertion can
    with pytest.raises((AssertionError, PluginError)):
        kit_for(AppliesNaN("toy-nan")).test_non_finite_step_is_skipped_and_leaves_the_weights(MODEL)


def test_kit_fixtures_raise_no_pytest_deprecation_warning(tmp_path):
    """A backend author's test class, collected by pytest with its deprecations as errors."""
    (tmp_path / "test_kit.py").write_text(
        "from polyrl.testing.conformance import BackendConformance\n"
        "class TestNothingInstalled(BackendConformance):\n"
        "    backend = 'nope'\n"
        "    def test_fixture_resolves(self, model_dir):\n"
        "        assert model_dir\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-k", "fixture_resolves", "-p", "no:cacheprovider",
         "-W", "error::pytest.PytestRemovedIn10Warning", "test_kit.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout


# --- chats whose text spells the template's special tokens -------------------------------------

SPECIALS = {"<|im_start|>": 1, "<|im_end|>": 2}


@pytest.fixture
def chat_model(tmp_path):
    """A model folder whose tokenizer declares the two chat special tokens (all the kit reads)."""
    added = [{"id": i, "content": text, "special": True} for text, i in SPECIALS.items()]
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))
    return str(tmp_path)


def _render(messages, add_generation_prompt: bool) -> list[str]:
    """A ChatML template as pieces: the template's specials, and each message's text."""
    parts: list[str] = []
    for m in messages:
        parts += ["<|im_start|>", m["role"] + "\n" + m["content"], "<|im_end|>", "\n"]
    return parts + (["<|im_start|>", "assistant\n"] if add_generation_prompt else [])


def _text_ids(text: str) -> list[int]:
    return [3 + ord(ch) % 13 for ch in text]


def literal_encoding(messages, add_generation_prompt: bool) -> list[int]:
    """Only the template's own specials are special: a message's text is characters."""
    return [t for p in _render(messages, add_generation_prompt)
            for t in ([SPECIALS[p]] if p in SPECIALS else _text_ids(p))]


def naive_encoding(messages, add_generation_prompt: bool) -> list[int]:
    """The rendered string tokenized whole: a special spelled in a message becomes the token."""
    text = "".join(_render(messages, add_generation_prompt))
    pieces = re.split("(" + "|".join(re.escape(s) for s in SPECIALS) + ")", text)
    return [t for p in pieces if p for t in ([SPECIALS[p]] if p in SPECIALS else _text_ids(p))]


def chat_toy(toy_module, generate_encoding, encode_chat_encoding):
    class ChatToy(toy_module.ToyPlugin):
        @hookimpl
        def generate(self, engine, prompts, sampling):
            out = toy_module.generate(engine, prompts, sampling)
            return [attrs.evolve(c, prompt_ids=generate_encoding(prompts[c.prompt_index], True)) for c in out]

        @hookimpl
        def encode_chat(self, engine, messages, tools, add_generation_prompt):
            return encode_chat_encoding(messages, add_generation_prompt)

    return ChatToy


def _check_spelled_specials(plugin, model: str) -> None:
    kit = kit_for(plugin)
    kit.test_spelled_special_tokens_in_messages_are_text(kit._engine(model, role="generate"))


def test_kit_passes_a_chat_that_reads_spelled_special_tokens_as_text(toy_module, chat_model):
    _check_spelled_specials(chat_toy(toy_module, literal_encoding, literal_encoding)("toy-literal"), chat_model)


def test_kit_catches_encode_chat_reading_a_spelled_im_end_as_the_token(toy_module, chat_model):
    plugin = chat_toy(toy_module, literal_encoding, naive_encoding)("toy-naive-encode")
    with pytest.raises(AssertionError, match="encode_chat read special-token strings"):
        _check_spelled_specials(plugin, chat_model)


def test_kit_catches_generate_reading_a_spelled_im_end_as_the_token(toy_module, chat_model):
    plugin = chat_toy(toy_module, naive_encoding, naive_encoding)("toy-naive-generate")
    with pytest.raises(AssertionError, match="generate read special-token strings"):
        _check_spelled_specials(plugin, chat_model)


# --- generation_phase --------------------------------------------------------------------------


class _Gathered:
    """A well-behaved phase: something held while inside (a sharded backend's gathered weights)."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def __enter__(self):
        self.engine.held = getattr(self.engine, "held", 0) + 1

    def __exit__(self, *exc):
        self.engine.held -= 1
        return False


def phased_toy(toy_module, phase):
    class PhasedToy(toy_module.ToyPlugin):
        @hookimpl
        def generation_phase(self, engine):
            return phase(engine)

    return PhasedToy


def _check_phase(toy_module, phase, name: str) -> None:
    kit = kit_for(phased_toy(toy_module, phase)(name))
    kit.test_generation_phase_holds_a_rollout(kit._engine(MODEL, role="generate"))


def test_kit_passes_a_fresh_phase_per_rollout_and_no_phase(toy_module):
    _check_phase(toy_module, _Gathered, "toy-phase-good")
    _check_phase(toy_module, lambda engine: None, "toy-phase-none")


def test_kit_catches_a_phase_that_is_no_context_manager(toy_module):
    with pytest.raises(PluginError, match="hook generation_phase: returned bool, expected a context manager"):
        _check_phase(toy_module, lambda engine: True, "toy-phase-bool")


def test_kit_catches_a_phase_that_can_be_entered_only_once(toy_module):
    """One ``@contextmanager`` object built at load and returned for every rollout: the second
    rollout's ``with`` finds its generator spent."""

    @contextlib.contextmanager
    def hold():
        yield

    cached = {}

    def phase(engine):
        return cached.setdefault(id(engine), hold())

    with pytest.raises(PluginError, match="generation_phase: entering its context raised"):
        _check_phase(toy_module, phase, "toy-phase-once")


def test_kit_catches_a_phase_that_changes_the_model_and_leaves_it_changed(toy_module):
    class Tilted:
        def __init__(self, engine) -> None:
            self.engine = engine

        def __enter__(self):
            self.engine.logits[3] += 4.0  # e.g. a stale shard gathered over the live weights

        def __exit__(self, *exc):
            return False

    with pytest.raises(AssertionError, match="samples differently"):
        _check_phase(toy_module, Tilted, "toy-phase-tilted")


# --- declared capabilities without their hooks -------------------------------------------------


def test_kit_catches_a_declared_capability_whose_hook_is_missing(toy_module):
    class NoCheckpointHooks(toy_module.ToyPlugin):
        save_checkpoint = None  # declares checkpoint=True (ToyPlugin.capabilities) but answers nothing
        load_checkpoint = None

    kit_for(toy_module.ToyPlugin("toy-all-hooks")).test_every_declared_capability_has_its_hook()
    with pytest.raises(AssertionError, match=r"save_checkpoint \(declared checkpoint=True\).*load_checkpoint"):
        kit_for(NoCheckpointHooks("toy-no-ckpt")).test_every_declared_capability_has_its_hook()


# --- model folders as transformers 5 saves them ------------------------------------------------


def test_the_template_variables_check_passes_on_a_folder_whose_template_is_its_own_file(tiny_model_dir, tmp_path):
    """transformers 5's ``save_pretrained`` writes the chat template to ``chat_template.jinja``,
    which wins over ``tokenizer_config.json``'s; the kit wrote its probe template to the config
    alone, so on such a ``model_dir`` it failed the torch backend, which renders right
    ("assert text.endswith('probe: thinking off\\n')")."""
    pytest.importorskip("torch")
    from transformers import AutoTokenizer

    model = tmp_path / "saved"
    shutil.copytree(tiny_model_dir, model)
    AutoTokenizer.from_pretrained(str(model)).save_pretrained(str(model))
    assert (model / "chat_template.jinja").is_file()
    kit = type("TorchKit", (BackendConformance,), {"backend": "torch"})()
    kit.test_chat_template_kwargs_reach_the_template(str(model), tmp_path / "kit")


# --- the optional entropies hook ---------------------------------------------------------------


def _entropy_of(engine, temperature: float) -> float:
    """The toy's entropy (nats) at ``temperature``: one unigram distribution at every position."""
    logp = engine.logp(temperature)
    return float(-(np.exp(logp) * logp).sum())


def entropy_toy(toy_module, entropy):
    """The toy backend with an ``entropies`` hook answering ``entropy(engine, sequence, temperature)``."""
    class EntropyToy(toy_module.ToyPlugin):
        @hookimpl
        def entropies(self, engine, sequences, temperature):
            return [entropy(engine, s, temperature) for s in sequences]

    return EntropyToy


def _check_entropies(plugin) -> None:
    kit = kit_for(plugin)
    kit.vocab_size = 16  # the toy reads no model folder
    engine = kit._engine(MODEL, role="generate")
    engine.raw.logits = np.linspace(-2.0, 2.0, 16)  # not uniform: temperature changes the entropy
    kit.test_entropies_are_the_distributions_entropies(engine)


def _right(engine, seq, temperature):
    return np.full(len(seq.completion_ids), _entropy_of(engine, temperature), np.float32)


def test_kit_passes_right_entropies_and_reports_a_backend_without_them(toy_module):
    _check_entropies(entropy_toy(toy_module, _right)("toy-ent-good"))
    with pytest.raises(pytest.skip.Exception, match="'toy-ent-none' does not implement the optional entropies hook: "
                                                    "as the train backend, its eval loss .* eval/policy_loss alone"):
        _check_entropies(toy_module.ToyPlugin("toy-ent-none"))

    class GeneratesOnly(toy_module.ToyPlugin):
        capabilities = attrs.evolve(toy_module.ToyPlugin.capabilities, train_step=False, weight_export=False,
                                    checkpoint=False)

    with pytest.raises(pytest.skip.Exception, match="asks it of the train backend only, and this one does not train"):
        _check_entropies(GeneratesOnly("toy-ent-generates"))


@pytest.mark.parametrize("entropy, message", [
    # the temperature ignored: right at 1, wrong at 0.7
    (lambda engine, seq, t: _right(engine, seq, 1.0),
     r"entropies at temperature 0\.7, sequence 0 position 0: 2\.2\d+, but the distribution .* has entropy 1\.9\d+"),
    # bits instead of nats
    (lambda engine, seq, t: _right(engine, seq, t) / np.log(2), r"more than log\(16\) = 2\.7726"),
    # the sampled token's surprisal, not the distribution's entropy (a rare token's passes log V)
    (lambda engine, seq, t: -engine.logp(t)[seq.completion_ids].astype(np.float32),
     r"entropies array \d holds 4\.\d+ at temperature 1\.0, more than log\(16\)"),
], ids=["temperature-ignored", "bits", "surprisal"])
def test_kit_catches_wrong_entropies(toy_module, entropy, message):
    with pytest.raises(AssertionError, match=message):
        _check_entropies(entropy_toy(toy_module, entropy)(f"toy-ent-{id(entropy)}"))


def test_kit_names_entropies_of_the_wrong_shape(toy_module):
    wrong = entropy_toy(toy_module, lambda engine, seq, t: _right(engine, seq, t)[:-1])
    with pytest.raises(PluginError, match=r"hook entropies: array 0 has shape .*one entropy per completion token"):
        _check_entropies(wrong("toy-ent-short"))
