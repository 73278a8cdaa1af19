"""The MoE router load-balancing loss at its edges: a config.json's ``null`` coefficient, TRL's
micro-batch (``from_trl``), steps that train nothing, engines passed in, and FSDP.

Each as TRL 1.16 (and transformers 5, which loads the model) does it; the term itself is checked
against TRL's ``_compute_loss`` in ``test_router_aux.py``.
"""

from __future__ import annotations

import json

import attrs
import numpy as np
import pytest
import torch
from hf_families import require_backends
from structlog.testing import capture_logs
from model_copies import edited_copy
from test_router_aux import routed_moe, trl_inputs, trl_state

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.errors import ConfigError
from polyrl.types import TokenSequence, TrainBatch


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory) -> str:
    return routed_moe(tmp_path_factory.mktemp("router-aux-edges"))


def _run_config(model: str, tmp_path, backend: str = "torch", algorithm: dict | None = None, **sections):
    from polyrl.config import RunConfig

    return RunConfig.from_dict({
        "model": {"path": model}, "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": sections.pop("rewards", [{"name": "numeric_match"}]), "backends": {"train": backend, **sections.pop("backends", {})},
        "algorithm": algorithm or {},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
        **sections})


# --- 1. "router_aux_loss_coef": null in config.json ------------------------------------------------


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_null_coefficient_in_config_json_is_one_error_line_on_every_backend_and_eval(backend, moe_path, tmp_path,
                                                                                      monkeypatch):
    """transformers 5 refuses to load a Qwen2-MoE config whose router_aux_loss_coef is null (a
    float field), and TRL, where it loads, weights its loss by None. Before: the core read it as
    0 (torch: no term), MLX as the type's default 0.001, eval.loss as not 0, and the run failed
    only when the backend loaded the model, with transformers' validation traceback in a
    PluginError. Now it is one ``error:`` before any model loads, the same on every backend and
    in the eval loss, whatever algorithm.router_aux_loss_coef says."""
    if backend == "mlx":
        require_backends("mlx")
    from polyrl import engines, eval_loss
    from polyrl.backend_kit.router_aux import router_aux_coef
    from polyrl.trainer import Trainer

    null = edited_copy(moe_path, tmp_path / "null", {"router_aux_loss_coef": None})
    config = json.loads((null / "config.json").read_text())
    for requested in (None, 0.5):
        with pytest.raises(ConfigError, match="null") as err:
            router_aux_coef(config, requested)
        assert err.value.field == "model.path" and "config.json" in err.value.fix
    with pytest.raises(ConfigError, match="null"):
        eval_loss.needs_router_loss(AlgorithmConfig.preset("grpo"), str(null))
    monkeypatch.setattr(engines, "Engine", lambda *a, **k: pytest.fail("a model was loaded before the refusal"))
    for coef in (None, 0.0, 0.5):
        algorithm = {} if coef is None else {"router_aux_loss_coef": coef}
        with pytest.raises(ConfigError, match='"router_aux_loss_coef": null') as err:
            Trainer(_run_config(str(null), tmp_path, backend, algorithm))
        assert err.value.field == "model.path"


# --- 2. from_trl: TRL's micro-batch for the router term --------------------------------------------


def test_from_trl_trains_a_moe_router_term_over_trls_micro_batches(moe_path, tiny_model_dir, tmp_path):
    """TRL adds coef x aux_loss of each per_device_train_batch_size micro-batch / accumulation
    steps; the load-balancing loss is not linear in a micro-batch. Before: from_trl left
    optimizer.micro_batch_size unset, so polyrl took the term over the rank's whole batch, another
    loss than TRL's (a mean of products of means is not the product of the means). Now a TRL config
    training a MoE model with the term on gets micro_batch_size = per_device_train_batch_size: the
    step's loss and aux_loss equal TRL's two accumulated micro-batches. A dense model, and the term
    off, keep polyrl's default (their loss does not depend on it)."""
    trl = pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    from polyrl import api
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    def trl_config(**values):
        return trl.GRPOConfig(use_cpu=True, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                              num_generations=2, max_steps=1, learning_rate=1e-2, max_grad_norm=0.0,
                              output_dir=str(tmp_path / "out"), report_to="none", **values)

    def run_config(model: str, config):
        return api.run_config(api.grpo, policy=api.Agent(model), prompts=["1 + 1 ="],
                              grpo_config=config)[0]

    config = run_config(moe_path, trl_config(router_aux_loss_coef=0.3))
    assert config.optimizer.micro_batch_size == 2
    assert run_config(moe_path, trl_config()).optimizer.micro_batch_size == 2  # the model's own 0.001
    assert run_config(moe_path, trl_config(router_aux_loss_coef=0.0)).optimizer.micro_batch_size is None
    assert run_config(tiny_model_dir, trl_config()).optimizer.micro_batch_size is None

    seqs = [TokenSequence(np.array([5, 17, 42]), np.array([7, 99, 4, 250, 11, 64, 8])),
            TokenSequence(np.array([9, 4, 6]), np.arange(20, 30)),
            TokenSequence(np.array([8, 8, 12]), np.array([60, 61, 62])),
            TokenSequence(np.array([30, 2, 77]), np.array([15, 16, 90, 91, 5]))]
    adv = np.array([1.0, -0.2, 0.5, -1.3])
    model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32)
    model.train()
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    state = trl_state(model, 0.3, accumulation=2)
    trl_loss = sum(float(GRPOTrainer._compute_loss(state, model, trl_inputs(seqs[i:i + 2], adv[i:i + 2])).detach())
                   for i in (0, 2))
    trl_aux = float(np.mean(state._metrics["train"]["aux_loss"]))

    engine = Engine(get_registry(), "torch", EngineConfig(model=moe_path, role="train", threads=1,
                                                          optimizer=config.optimizer))
    metrics = engine.train_step(TrainBatch(seqs, adv), config.algorithm.objective())
    assert metrics.extra["aux_loss"] == pytest.approx(trl_aux, rel=1e-5)
    assert metrics.loss == pytest.approx(trl_loss, rel=1e-6, abs=1e-7)
    whole = Engine(get_registry(), "torch", EngineConfig(model=moe_path, role="train", threads=1)).train_step(
        TrainBatch(seqs, adv), config.algorithm.objective())  # polyrl's default: one micro-batch
    assert abs(whole.extra["aux_loss"] - trl_aux) > 1e-4, "the micro-batch size did not matter to the check"


# --- 4. steps that train nothing (every advantage 0) ------------------------------------------------


def idle_step_trainer(moe: str, tmp_path):
    """A one-step torch run on ``moe`` (router coefficient 0.5, 2 prompts x 2 completions) whose
    reward scores nothing: every advantage is 0 (the router term still trains, as in TRL)."""
    from polyrl.trainer import Trainer

    (tmp_path / "never.py").write_text("def never(completions, **kw):\n    return [None] * len(completions)\n")
    return Trainer(_run_config(moe, tmp_path, algorithm={"router_aux_loss_coef": 0.5},
                               generation={"group_size": 2, "max_new_tokens": 4, "temperature": 1.0},
                               rewards=[{"function": f"{tmp_path / 'never.py'}:never"}]))


def test_a_step_with_every_advantage_0_still_trains_the_router_term(moe_path, tmp_path):
    """No reward scored any completion: TRL's advantages are all 0 and its loss is coef x
    aux_loss, whose gradient moves the routers. Before: polyrl's idle updates ran with the router
    term off (a zero gradient, the optimizer's step alone). Now the step trains the completions
    at advantage 0 with the run's coefficient, as with the KL term in the loss: the term is in
    their loss and their gradient is not 0."""
    trainer = idle_step_trainer(moe_path, tmp_path)
    seen = []
    plain = trainer.train_engine.train_step

    def recorded(batch, objective):
        out = plain(batch, objective)
        seen.append((len(batch.sequences), objective.router_aux_loss_coef, out))
        return out

    trainer.train_engine.train_step = recorded
    summary = trainer.run(progress=False)
    assert summary["steps"] == 1 and len(seen) == 1
    assert summary["history"][0]["aux_loss"] == pytest.approx(seen[0][2].extra["aux_loss"])
    rows, coef, out = seen[-1]
    assert coef == 0.5 and rows == 4  # every completion of the step (mask_truncated_completions off)
    assert out.extra["aux_loss"] > 0 and out.grad_norm > 0
    assert out.loss == pytest.approx(0.5 * out.extra["aux_loss"], rel=1e-5)  # the policy term is 0


# --- 5. engines passed in ------------------------------------------------------------------------------


def test_engines_passed_in_get_the_startup_router_check(tiny_model_dir, tmp_path):
    """``Trainer(engines=...)`` (polyrl.trl's evaluate(), a script's own engines) skipped the check
    load_engines runs, so a coefficient on a dense model reached the first train_step, after a
    rollout. It is refused at construction now, naming the field."""
    from polyrl.engines import load_engines
    from polyrl.registry import get_registry
    from polyrl.trainer import Trainer

    loaded = load_engines(_run_config(tiny_model_dir, tmp_path), get_registry())
    with pytest.raises(ConfigError, match="not a Mixture-of-Experts model") as err:
        Trainer(_run_config(tiny_model_dir, tmp_path, algorithm={"router_aux_loss_coef": 0.01}), engines=loaded)
    assert err.value.field == "algorithm.router_aux_loss_coef"
    Trainer(_run_config(tiny_model_dir, tmp_path), engines=loaded)  # no coefficient: accepted


def test_engines_passed_in_for_a_moe_family_mlx_has_no_term_for_are_refused(tmp_path):
    """The same check for the other refusal it makes: a MoE family MLX reads no router of."""
    require_backends("mlx")
    from types import SimpleNamespace

    from polyrl.trainer import Trainer
    from test_router_aux import _unsupported_moe

    model = _unsupported_moe(tmp_path / "mixtral", 0.02)
    given = SimpleNamespace(model_path=model)  # refused before anything reads an engine
    with pytest.raises(ConfigError, match="has no Mixture-of-Experts load-balancing loss") as err:
        Trainer(_run_config(model, tmp_path, "mlx"), engines=given)
    assert err.value.field == "algorithm.router_aux_loss_coef"


# --- 6. FSDP -------------------------------------------------------------------------------------------


def test_fsdp_with_the_router_term_is_refused_before_torchrun_starts(moe_path, tmp_path):
    """The sharded forward returns no router logits, so torch's train_step refuses the term under
    FSDP, but only after the first rollout. ``polyrl launch``'s check (and each rank's, under
    torchrun) refuses it before any model loads now; one process (fsdp a no-op) and a term of 0
    pass."""
    from polyrl.backend_features import check_router_aux
    from polyrl.registry import get_registry
    from polyrl.trainer import check_run

    def config(coef=None):
        return _run_config(moe_path, tmp_path, algorithm={} if coef is None else {"router_aux_loss_coef": coef},
                           backends={"options": {"fsdp": True}})

    for coef in (None, 0.5):
        with pytest.raises(ConfigError, match="fsdp") as err:
            check_run(config(coef), world_size=2)
        assert err.value.field == "algorithm.router_aux_loss_coef" and "router_aux_loss_coef = 0" in err.value.fix
    check_run(config(0.0), world_size=2)
    check_router_aux(config(0.5), get_registry(), moe_path, launched=False)  # one process: trains unsharded


@pytest.mark.slow  # one torchrun launch of two ranks
def test_fsdp_ranks_refuse_the_router_term_in_train_step_naming_the_fix(moe_path, tmp_path):
    """What a sharded train_step does with the term (engines built outside a Trainer): both ranks
    raise the same error line, none hangs in a collective."""
    import subprocess

    from test_distributed import SCRIPT, TWO_RANKS

    result = subprocess.run([*TWO_RANKS, str(SCRIPT), moe_path, "--out", str(tmp_path / "out.json"), "--fsdp",
                             "--router", "0.5", "--micro", "1", "--steps", "1"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    lines = [x for x in result.stderr.splitlines()
             if "algorithm.router_aux_loss_coef: the MoE load-balancing loss is not supported under FSDP" in x]
    assert len(lines) == 2 and "set router_aux_loss_coef = 0" in lines[0], result.stderr[-3000:]


# --- 3. completions cut under mask_truncated_completions, and TRL's shuffled micro-batches ------------


def _reference_aux(model, rows) -> float:
    """transformers' own ``aux_loss`` over one micro-batch laid out as TRL lays it out: prompts
    left-padded, completions right-padded, the attention mask TRL builds (``prompt_mask`` +
    ``completion_mask``, the latter zeroed for a completion cut under mask_truncated_completions).
    ``rows``: (prompt ids, completion ids, cut). Positions count the real tokens (polyrl right-pads;
    prompts of unequal length)."""
    wide_p = max(len(p) for p, _, _ in rows)
    wide_c = max(len(c) for _, c, _ in rows)
    ids = np.full((len(rows), wide_p + wide_c), 3)
    mask = np.zeros(ids.shape, dtype=np.int64)
    for i, (prompt, completion, cut) in enumerate(rows):
        ids[i, wide_p - len(prompt):wide_p] = prompt
        mask[i, wide_p - len(prompt):wide_p] = 1
        ids[i, wide_p:wide_p + len(completion)] = completion
        mask[i, wide_p:wide_p + len(completion)] = 0 if cut else 1
    position = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    position_ids=torch.from_numpy(position), output_router_logits=True)
    return float(out.aux_loss)


def _recorded_trainer(config, cut=lambda i: True):
    """A Trainer whose rollouts mark completion i cut at the length limit where ``cut(i)``, else
    stopped (random weights rarely sample EOS), and that records its rollouts' completions and
    every train_step's (batch, objective, metrics)."""
    from polyrl.trainer import Trainer

    trainer = Trainer(config)
    rollouts, steps = [], []
    plain_rollout, plain_step = trainer._rollout, trainer.train_engine.train_step

    def rollout(times):
        out = plain_rollout(times)
        for i, c in enumerate(out.completions):
            c.finish_reason = "length" if cut(i) else "stop"
        rollouts.append(list(out.completions))
        return out

    def step(batch, objective):
        out = plain_step(batch, objective)
        steps.append((batch, objective, out))
        return out

    trainer._rollout, trainer.train_engine.train_step = rollout, step
    return trainer, rollouts, steps


def _ranked_reward(tmp_path, unscored: tuple[int, ...] = ()) -> list[dict]:
    """Rewards 0, 1, 2, 0, ... by position (advantages not 0), None for the completions ``unscored``."""
    (tmp_path / "ranked.py").write_text("def ranked(completions, **kw):\n"
                                        f"    return [None if i in {unscored!r} else float(i % 3) "
                                        "for i in range(len(completions))]\n")
    return [{"function": f"{tmp_path / 'ranked.py'}:ranked"}]


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_cut_completions_prompt_counts_in_the_router_term_as_in_trls_attention_mask(backend, moe_path, tmp_path):
    """TRL keeps a completion cut under mask_truncated_completions in its micro-batch with its
    completion mask zeroed; its attention mask still covers the prompt, so the prompt's tokens
    count in the router term. It keeps an unscored completion (every reward None) whole, at
    advantage 0. Before: polyrl left both rows out of the batch (a startup warning said so for
    the cut one), so the term averaged over fewer tokens than TRL's. Now the cut row reaches the
    backend as its prompt alone and the unscored one whole, each in its place: the step's
    aux_loss is transformers' own over TRL's layout of the whole batch."""
    from transformers import AutoModelForCausalLM

    if backend == "mlx":
        require_backends("mlx")
    config = _run_config(moe_path, tmp_path, backend,
                         algorithm={"router_aux_loss_coef": 0.5, "mask_truncated_completions": True},
                         generation={"group_size": 2, "max_new_tokens": 4, "temperature": 1.0},
                         rewards=_ranked_reward(tmp_path, unscored=(2,)))
    model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()  # the weights before the step
    trainer, rollouts, steps = _recorded_trainer(config, cut=lambda i: i % 2 == 1)
    summary = trainer.run(progress=False)
    assert not summary["history"][0].get("skipped") and len(steps) == 1
    (completions,), (batch, _, out) = rollouts, steps[0]
    assert len(batch.sequences) == len(completions) == 4  # every row of TRL's batch, the cut ones too
    for c, seq in zip(completions, batch.sequences):
        assert np.array_equal(seq.prompt_ids, c.prompt_ids)
        assert np.array_equal(seq.completion_ids, c.completion_ids if c.finish_reason == "stop" else [])
    assert batch.advantages[1:].tolist() == [0.0] * 3 and batch.advantages[0] != 0  # cut, unscored, cut
    want = _reference_aux(model, [(c.prompt_ids, c.completion_ids, c.finish_reason == "length") for c in completions])
    assert out.extra["aux_loss"] == pytest.approx(want, rel=1e-5)
    assert summary["history"][0]["aux_loss"] == pytest.approx(want, rel=1e-5)
    uncut = _reference_aux(model, [(c.prompt_ids, c.completion_ids, False) for c in completions[::2]])
    assert abs(uncut - want) > 1e-4, "the cut rows' prompts did not change the term: the check checks nothing"


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_step_whose_every_completion_was_cut_trains_the_router_term_over_the_prompts(backend, moe_path, tmp_path):
    """Every completion cut under mask_truncated_completions: TRL's batch has no loss token, its
    loss is coef x aux_loss over the prompts (the attention mask's only tokens) and its gradient
    moves the routers. Before: polyrl's idle update found no row for the term and stepped the
    optimizer alone (loss and grad_norm logged 0, no aux_loss). Now it trains the term over every
    row's prompt: aux_loss is transformers' own over the prompts, the step logs TRL's loss
    (coef x aux_loss) and a gradient."""
    from transformers import AutoModelForCausalLM

    if backend == "mlx":
        require_backends("mlx")
    config = _run_config(moe_path, tmp_path, backend,
                         algorithm={"router_aux_loss_coef": 0.5, "mask_truncated_completions": True},
                         generation={"group_size": 2, "max_new_tokens": 3, "temperature": 1.0})
    model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()
    trainer, rollouts, steps = _recorded_trainer(config)
    with capture_logs() as logs:
        summary = trainer.run(progress=False)
    row = summary["history"][0]
    assert row["skipped"] and len(steps) == 1, steps
    # the step's warning says what trained (it said "nothing trained", "a zero gradient")
    (warned,) = [e["event"] for e in logs if e["event"].startswith("no informative samples")]
    assert warned.endswith("; only the MoE router term trained (TRL's loss there is that term alone)"), warned
    (completions,), (batch, objective, out) = rollouts, steps[0]
    assert objective.router_aux_loss_coef == 0.5 and [len(s.completion_ids) for s in batch.sequences] == [0] * 4
    want = _reference_aux(model, [(c.prompt_ids, c.completion_ids, True) for c in completions])
    assert out.extra["aux_loss"] == pytest.approx(want, rel=1e-5) and out.grad_norm > 0
    assert row["aux_loss"] == pytest.approx(want, rel=1e-5)
    assert row["loss"] == pytest.approx(0.5 * want, rel=1e-5) and row["grad_norm"] == pytest.approx(out.grad_norm)


def test_an_all_cut_step_trains_the_router_term_over_its_mini_batches(moe_path, tmp_path):
    """With minibatches = 2 (TRL: steps_per_generation = 2 x gradient_accumulation_steps) TRL's
    all-cut step makes two optimizer steps, each over its half of the shuffled batch, so each
    update's term is its half's. Now the idle updates split the prompt-only rows as a trained
    step's rows are split: two updates, each over two of the four prompts, the first one's
    aux_loss transformers' own over its rows (the second's runs on the weights the first moved)."""
    from transformers import AutoModelForCausalLM

    config = _run_config(moe_path, tmp_path, algorithm={"router_aux_loss_coef": 0.5, "mask_truncated_completions": True,
                                                        "minibatches": 2},
                         generation={"group_size": 2, "max_new_tokens": 3, "temperature": 1.0})
    model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()
    trainer, rollouts, steps = _recorded_trainer(config)
    summary = trainer.run(progress=False)
    assert summary["history"][0]["skipped"] and len(steps) == 2
    (completions,) = rollouts
    assert all(objective.router_aux_loss_coef == 0.5 and len(batch.sequences) == 2 for batch, objective, _ in steps)
    seen = sorted(tuple(s.prompt_ids) for batch, _, _ in steps for s in batch.sequences)
    assert seen == sorted(tuple(c.prompt_ids) for c in completions)
    assert all(len(s.completion_ids) == 0 for batch, _, _ in steps for s in batch.sequences)
    batch, _, out = steps[0]
    want = _reference_aux(model, [(s.prompt_ids, s.completion_ids, True) for s in batch.sequences])
    assert out.extra["aux_loss"] == pytest.approx(want, rel=1e-5)


def test_micro_batches_of_a_router_term_hold_shuffled_rows_as_trls_do(moe_path, tmp_path):
    """TRL shuffles its generation batch (``shuffle_sequence_dict``: torch.randperm on the global
    generator, whose state no seed reproduces outside TRL) before cutting micro-batches, and the
    router term is a mean per micro-batch, not linear in its tokens. Before: polyrl cut its batch
    in order, so a group's completions (one prompt, routed alike) shared a micro-batch. Now, where
    the loss holds the term and micro_batch_size cuts the batch, the rows are shuffled with the
    step's seed (the same law over micro-batch contents as TRL's, not TRL's draw): the same order
    for the same seed, and aux_loss the mean of transformers' own term over those micro-batches."""
    from transformers import AutoModelForCausalLM

    def run(seed: int, coef: float = 0.5):
        config = _run_config(moe_path, tmp_path / f"{seed}-{coef}", algorithm={"router_aux_loss_coef": coef},
                             generation={"group_size": 4, "max_new_tokens": 3, "temperature": 1.0},
                             optimizer={"micro_batch_size": 2}, rewards=_ranked_reward(tmp_path))
        config = attrs.evolve(config, train=attrs.evolve(config.train, seed=seed))
        trainer, rollouts, steps = _recorded_trainer(config, cut=lambda i: False)
        trainer.run(progress=False)
        (completions,), ((batch, _, out),) = rollouts, steps
        order = [next(i for i, c in enumerate(completions) if np.array_equal(c.completion_ids, s.completion_ids)
                      and np.array_equal(c.prompt_ids, s.prompt_ids)) for s in batch.sequences]
        return completions, order, out

    model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()
    completions, order, out = run(7)
    assert sorted(order) == list(range(8)) and order != list(range(8))
    pairs = [[completions[i] for i in order[k:k + 2]] for k in range(0, 8, 2)]
    want = np.mean([_reference_aux(model, [(c.prompt_ids, c.completion_ids, False) for c in pair]) for pair in pairs])
    assert out.extra["aux_loss"] == pytest.approx(want, rel=1e-5)
    again, order_again, _ = run(7)
    assert order_again == order and all(np.array_equal(a.completion_ids, b.completion_ids)
                                        for a, b in zip(completions, again))
    _, plain, _ = run(7, coef=0.0)  # no router term: the batch keeps its order (prompts shared in a forward)
    assert plain == list(range(8))
