"""A Mixture-of-Experts model's router load-balancing loss, added as TRL 1.16's GRPOTrainer adds it.

TRL: ``coef = args.router_aux_loss_coef``, else the model config's own (0.0 when none), a nonzero
one on a dense model an error; each micro-batch's loss gets ``coef x aux_loss / accumulation
steps``, ``aux_loss`` being Mixtral's ``load_balancing_loss_func`` of the backbone's router logits
over the forward's attention mask (prompt and completion, padding out), logged as ``aux_loss``.
Before: polyrl's loss had no router term, so a TRL user's MoE run silently trained without it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_families import build_family_model, largest_gap, require_backends
from model_copies import REMOVE, edited_copy

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, TokenSequence, TrainBatch

#: prompts of different lengths and completions of different lengths: padding must stay out. No
#: pad token (3): its embedding is zero, where every expert ties and top-k's pick is arbitrary
SEQS = [TokenSequence(np.array([5, 17, 42]), np.array([7, 99, 4, 250, 11, 64, 8, 31, 140, 22, 5])),
        TokenSequence(np.arange(4, 10), np.arange(20, 30)),
        TokenSequence(np.array([9, 4]), np.array([60, 61, 62]))]
ADV = np.array([1.0, -0.5, -0.5])


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory) -> str:
    return routed_moe(tmp_path_factory.mktemp("router-aux"))


def routed_moe(folder, model_type: str = "qwen2_moe") -> str:
    """The tiny Qwen2-MoE (or ``model_type``) with random routers: transformers initializes a router
    to zeros, where every expert ties and the load-balancing loss is the same constant for any tokens."""
    import shutil

    from transformers import AutoModelForCausalLM

    source = build_family_model(model_type, folder / model_type)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    routers = [p for name, p in model.named_parameters() if name.endswith("mlp.gate.weight")]
    assert routers, "no router found: the test would check a model without one"
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in routers:
            p.copy_(torch.randn(p.shape, generator=generator))
    out = folder / ("routed" if model_type == "qwen2_moe" else f"routed-{model_type}")
    model.save_pretrained(out)
    for f in (folder / model_type).iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, out / f.name)
    return str(out)


def trl_state(model, coef: float, accumulation: int):
    """TRL 1.16's GRPOTrainer state its ``_compute_loss`` reads (one process, grpo loss, beta 0,
    ``accumulation`` micro-batches a step)."""
    import contextlib
    import functools
    from collections import defaultdict
    from types import SimpleNamespace

    from trl.trainer.grpo_trainer import GRPOTrainer

    identity = SimpleNamespace(gather=lambda x: x, gather_for_metrics=lambda x: x, num_processes=1,
                               reduce=lambda x, reduction="sum": x, sync_gradients=True,
                               autocast=contextlib.nullcontext, is_main_process=True)
    state = SimpleNamespace(
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=accumulation),
        loss_type="grpo", beta=0.0, epsilon_low=0.2, epsilon_high=0.2, importance_sampling_level="token",
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, use_vllm=False,
        vllm_importance_sampling_correction=False, model=model, current_gradient_accumulation_steps=accumulation,
        accelerator=identity, _entropy_bonus_enabled=False, entropy_coef=0.0, use_adaptive_entropy=False,
        router_aux_loss_coef=coef, aux_loss_enabled=True, _metrics={"train": defaultdict(list)})
    state._get_per_token_logps_and_entropies = functools.partial(GRPOTrainer._get_per_token_logps_and_entropies,
                                                                 state)
    return state


def trl_inputs(seqs, adv) -> dict:
    """TRL's ``_compute_loss`` inputs for ``seqs`` (completions right-padded, prompts of one length)."""
    width = max(len(s.completion_ids) for s in seqs)
    completion = torch.zeros((len(seqs), width), dtype=torch.long)
    completion_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        completion[i, : len(s.completion_ids)] = torch.from_numpy(s.completion_ids)
        completion_mask[i, : len(s.completion_ids)] = 1
    prompt = np.stack([s.prompt_ids for s in seqs])
    return {"prompt_ids": torch.from_numpy(prompt), "prompt_mask": torch.ones(prompt.shape, dtype=torch.long),
            "completion_ids": completion, "completion_mask": completion_mask,
            "advantages": torch.as_tensor(adv, dtype=torch.float32)}


def _engine(path: str, micro: int | None = None, backend: str = "torch", checkpointing: bool = False) -> Engine:
    return Engine(get_registry(), backend, EngineConfig(
        model=path, role="train", threads=1, gradient_checkpointing=checkpointing,
        optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=None, micro_batch_size=micro)))


def _trl_formula(router_logits: list[np.ndarray], mask: np.ndarray, experts: int, top_k: int) -> float:
    """TRL's aux_loss written out (Switch Transformer eq. 4-6, as transformers computes it): over
    the real tokens of every layer, experts x sum_e (share of top-k slots routed to e) x (mean
    router probability of e)."""
    logits = np.concatenate(router_logits)  # [layers x rows x width, experts]
    keep = np.tile(mask.reshape(-1), len(router_logits)).astype(bool)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs = (probs / probs.sum(-1, keepdims=True))[keep]
    chosen = np.argsort(-probs, axis=-1)[:, :top_k]
    routed = np.zeros_like(probs)
    np.put_along_axis(routed, chosen, 1.0, axis=-1)
    return float(experts * np.sum(routed.mean(0) * probs.mean(0)))


def test_router_loss_is_transformers_load_balancing_loss_over_the_real_tokens(moe_path):
    """The term polyrl's forward computes equals the model's own ``aux_loss`` (transformers'
    Qwen2-MoE forward with ``output_router_logits``, left-padded as TRL pads prompts) and TRL's
    formula written out, over prompt and completion tokens with the padding left out."""
    from transformers import AutoModelForCausalLM

    from polyrl_torch.scoring import token_logprobs, token_logprobs_with_router_loss

    engine = _engine(moe_path)
    with torch.no_grad():
        logps, _, aux = token_logprobs_with_router_loss(engine.raw, SEQS, 1.0)
        plain = token_logprobs(engine.raw, SEQS, 1.0)
    assert largest_gap([x.numpy() for x in logps], [x.numpy() for x in plain]) < 1e-5  # same forward

    model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()
    rows = [np.concatenate([s.prompt_ids, s.completion_ids]) for s in SEQS]
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), 3)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):  # left padding, as TRL's prompts
        ids[i, width - len(r):] = r
        mask[i, width - len(r):] = 1
    position = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    position_ids=torch.from_numpy(position), output_router_logits=True)
    assert float(aux) == pytest.approx(float(out.aux_loss), rel=1e-5)
    config = model.config
    mine = _trl_formula([x.numpy() for x in out.router_logits], mask, config.num_experts,
                        config.num_experts_per_tok)
    assert float(aux) == pytest.approx(mine, rel=1e-5)
    # the padding would count if it were not masked: the term is not a quantity every mask gives
    unmasked = _trl_formula([x.numpy() for x in out.router_logits], np.ones_like(mask), config.num_experts,
                            config.num_experts_per_tok)
    assert abs(unmasked - mine) > 1e-4


def _step(path: str, coef: float | None, micro: int | None = None, backend: str = "torch",
          checkpointing: bool = False) -> tuple[object, list[np.ndarray]]:
    engine = _engine(path, micro, backend, checkpointing)
    metrics = engine.train_step(TrainBatch(SEQS, ADV), Objective(router_aux_loss_coef=coef))
    return metrics, engine.logprobs(SEQS, 1.0)


def test_train_step_adds_coef_times_the_mean_micro_batch_router_loss(moe_path):
    """coef x the micro-batches' mean router loss is in the step's loss (TRL: / accumulation
    steps), logged as TRL's ``aux_loss``; the gradient (the weights after the step) differs from
    coef 0's, which logs no ``aux_loss``."""
    from polyrl_torch.scoring import token_logprobs_with_router_loss

    off, after_off = _step(moe_path, 0.0, micro=1)
    on, after_on = _step(moe_path, 0.5, micro=1)
    assert "aux_loss" not in off.extra and not off.skipped and not on.skipped
    engine = _engine(moe_path)
    with torch.no_grad():
        each = [float(token_logprobs_with_router_loss(engine.raw, [s], 1.0)[2]) for s in SEQS]
    assert on.extra["aux_loss"] == pytest.approx(np.mean(each), rel=1e-5)
    assert on.loss - off.loss == pytest.approx(0.5 * np.mean(each), rel=1e-4)
    assert largest_gap(after_off, after_on) > 1e-4, "the router term changed no gradient"


def test_unset_coefficient_is_the_model_configs_own(moe_path):
    """None (TRL's default, and polyrl's): the config's router_aux_loss_coef (Qwen2-MoE's 0.001)."""
    from transformers import AutoConfig

    from polyrl.backend_kit.router_aux import router_aux_coef

    config = AutoConfig.from_pretrained(moe_path)
    assert router_aux_coef(config, None) == pytest.approx(config.router_aux_loss_coef) == pytest.approx(0.001)
    assert router_aux_coef(config, 0.0) == 0.0
    default, _ = _step(moe_path, None)
    off, _ = _step(moe_path, 0.0)
    assert default.loss - off.loss == pytest.approx(0.001 * default.extra["aux_loss"], rel=1e-3)


def test_coefficient_on_a_dense_model_is_an_error_line(tiny_model_dir):
    """TRL raises on a dense model with the coefficient set; polyrl names the field and the fix;
    unset or 0 on a dense model adds nothing (no ``aux_loss``)."""
    engine = _engine(tiny_model_dir)
    with pytest.raises(ConfigError) as err:
        engine.train_step(TrainBatch(SEQS, ADV), Objective(router_aux_loss_coef=0.01))
    assert err.value.field == "algorithm.router_aux_loss_coef"
    assert "not a Mixture-of-Experts model" in str(err.value) and "Fix:" in str(err.value)
    assert "aux_loss" not in engine.train_step(TrainBatch(SEQS, ADV), Objective()).extra


def test_algorithm_setting_reaches_the_objective_and_is_checked():
    assert AlgorithmConfig.preset("grpo").objective().router_aux_loss_coef is None
    assert AlgorithmConfig.preset("grpo", router_aux_loss_coef=0.02).objective().router_aux_loss_coef == 0.02
    with pytest.raises(ConfigError, match="router_aux_loss_coef"):
        AlgorithmConfig.preset("grpo", router_aux_loss_coef=-1.0)


def test_from_trl_translates_router_aux_loss_coef():
    """TRL's field is read (no longer refused); unset stays unset: the model's own coefficient."""
    trl = pytest.importorskip("trl")
    from polyrl import api

    def settings(**values):
        return api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True, **values)).settings

    assert settings(router_aux_loss_coef=0.02)["algorithm.router_aux_loss_coef"] == 0.02
    assert settings(router_aux_loss_coef=0.0)["algorithm.router_aux_loss_coef"] == 0.0
    assert "algorithm.router_aux_loss_coef" not in settings()


def test_a_backend_without_the_term_refuses_a_moe_model_unless_0():
    from polyrl.backend_kit.router_aux import refuse_router_aux

    moe = {"model_type": "qwen2_moe", "num_experts": 4, "router_aux_loss_coef": 0.001}
    with pytest.raises(ConfigError, match="has no Mixture-of-Experts load-balancing loss") as err:
        refuse_router_aux(moe, None, "mlx")
    assert err.value.field == "algorithm.router_aux_loss_coef"
    with pytest.raises(ConfigError):
        refuse_router_aux({"model_type": "qwen3_moe", "num_experts": 4}, None, "mlx")  # coefficient unknown
    refuse_router_aux(moe, 0.0, "mlx")
    refuse_router_aux({"model_type": "llama"}, None, "mlx")
    with pytest.raises(ConfigError, match="not a Mixture-of-Experts"):
        refuse_router_aux({"model_type": "llama"}, 0.01, "mlx")


@pytest.mark.parametrize("coef", [None, 0.3], ids=["trl-default", "set"])
def test_loss_and_aux_metric_equal_trl_compute_loss_on_the_same_batch(moe_path, coef):
    """TRL 1.16's own ``_compute_loss`` and forward (its fused LM head patch on the same model,
    ``router_aux_loss_coef`` and ``aux_loss_enabled`` as its ``__init__`` sets them for this model,
    one process, no accumulation) on the batch polyrl trains: the same loss and ``aux_loss``, with
    the coefficient left unset (TRL's default: the config's 0.001) and set. Prompts of one length:
    TRL left-pads prompts, polyrl right-pads rows."""
    pytest.importorskip("trl")

    from transformers import AutoModelForCausalLM
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    seqs = [TokenSequence(np.array([5, 17, 42]), np.array([7, 99, 4, 250, 11, 64, 8])),
            TokenSequence(np.array([9, 4, 6]), np.arange(20, 30)),
            TokenSequence(np.array([8, 8, 12]), np.array([60, 61, 62]))]
    adv = np.array([1.0, -0.2, 0.5])  # a policy term that is not 0 beside the router term
    model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32)
    model.train()
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    text_config = model.config.get_text_config()  # GRPOTrainer.__init__'s choice of the coefficient
    trl_coef = getattr(text_config, "router_aux_loss_coef", 0.0) if coef is None else coef
    assert hasattr(text_config, "output_router_logits") and trl_coef > 0  # TRL's aux_loss_enabled
    state = trl_state(model, trl_coef, accumulation=1)
    trl_loss = float(GRPOTrainer._compute_loss(state, model, trl_inputs(seqs, adv)).detach())
    (trl_aux,) = state._metrics["train"]["aux_loss"]

    objective = Objective() if coef is None else Objective(router_aux_loss_coef=coef)
    metrics = _engine(moe_path).train_step(TrainBatch(seqs, adv), objective)
    assert metrics.loss == pytest.approx(trl_loss, rel=1e-6, abs=1e-7)
    assert metrics.extra["aux_loss"] == pytest.approx(trl_aux, rel=1e-5)


@pytest.mark.slow  # two torchrun launches, tens of seconds
def test_two_ranks_average_the_router_loss_over_every_ranks_micro_batches(moe_path, tmp_path):
    """Under torchrun each micro-batch's term is divided by the micro-batches of every rank (TRL:
    accumulation steps, then DDP's mean over ranks): one process with 5 one-row micro-batches and
    two ranks with 3 + 2 take the same steps and log the same ``aux_loss``."""
    import sys

    from test_distributed import SCRIPT, TORCHRUN, TWO_RANKS, _run

    assert TORCHRUN, "torchrun comes with torch"
    args = ["--micro", "1", "--router", "0.5", "--steps", "2"]
    single = _run([sys.executable, str(SCRIPT), moe_path, "--out", str(tmp_path / "one.json"), *args],
                  tmp_path / "one.json")
    double = _run([*TWO_RANKS, str(SCRIPT), moe_path, "--out", str(tmp_path / "two.json"), *args],
                  tmp_path / "two.json")
    assert single["world"] == 1 and double["world"] == 2 and single["aux_loss"][0] > 0
    np.testing.assert_allclose(double["aux_loss"], single["aux_loss"], rtol=1e-5)
    np.testing.assert_allclose(double["losses"], single["losses"], rtol=1e-5, atol=1e-6)
    assert double["checksum"] == pytest.approx(single["checksum"], rel=1e-6)


@pytest.mark.parametrize("model_type", ["deepseek_v3", "glm4_moe", "lfm2_moe"])
def test_a_config_json_counting_experts_without_router_logits_is_no_moe(model_type, tmp_path):
    """DeepSeek-V3's, GLM-4-MoE's, LFM2-MoE's configs count experts but their transformers class has
    no ``output_router_logits``: TRL adds no router term for them. Before: their config.json was
    read as MoE by its expert count, so the eval loss was dropped (with a warning about a router
    term the training loss lacks) and a backend without the term refused them at startup."""
    import json

    from transformers import CONFIG_MAPPING

    from polyrl import eval_loss
    from polyrl.backend_kit.router_aux import is_moe, refuse_router_aux

    config = CONFIG_MAPPING[model_type]()
    assert not hasattr(config, "output_router_logits")  # TRL's test: not a MoE model there
    saved = json.loads(config.to_json_string(use_diff=False))
    assert any(saved.get(k) for k in ("num_experts", "n_routed_experts", "num_local_experts"))
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert not is_moe(saved)
    assert not eval_loss.needs_router_loss(AlgorithmConfig.preset("grpo"), str(tmp_path))
    refuse_router_aux(saved, None, "mlx")  # nothing to refuse: TRL adds no term either
    with pytest.raises(ConfigError, match="not a Mixture-of-Experts"):  # TRL refuses a coefficient there
        refuse_router_aux(saved, 0.01, "mlx")
    # a hand-written config.json of a family that returns router logits, or of a type transformers
    # does not know, still counts as MoE by its experts
    assert is_moe({"model_type": "qwen3_moe", "num_experts": 4})
    assert is_moe({"model_type": "someone_elses_moe", "num_local_experts": 4})


def test_eval_loss_is_not_computed_without_the_router_term_it_would_lack(moe_path, tiny_model_dir):
    """TRL's eval_loss holds coef x aux_loss too; the eval loss is numpy over ``logprobs`` (no
    router logits), so on a MoE model with the term it is left out, never logged without it."""
    from polyrl import eval_loss

    grpo = AlgorithmConfig.preset("grpo")
    assert eval_loss.needs_router_loss(grpo, moe_path)  # unset: the config's 0.001
    assert not eval_loss.needs_router_loss(AlgorithmConfig.preset("grpo", router_aux_loss_coef=0.0), moe_path)
    assert not eval_loss.needs_router_loss(grpo, tiny_model_dir)  # dense


# --- the MLX backend: the same term from mlx-lm's MoE blocks (polyrl_mlx.router_aux) ---------------
# Before: the MLX train_step refused every MoE model unless router_aux_loss_coef = 0, so by default
# (unset: the config's 0.001) an MLX user could not train Qwen2-MoE / Qwen3-MoE at all, and learnt
# it only at the first train_step, after a whole rollout.


@pytest.mark.parametrize("model_type", ["qwen2_moe", "qwen3_moe"])
def test_mlx_router_loss_equals_the_torch_backends_on_the_same_weights(model_type, moe_path, tmp_path):
    """The MLX forward's load-balancing loss (the gates mlx-lm's blocks compute, recorded) is the
    torch backend's (transformers' router logits) on the same weights and rows, prompt and
    completion tokens, padding out; the log-probs are those of the plain forward."""
    require_backends("mlx")
    from polyrl_mlx.scoring import flat_logprobs
    from polyrl_torch.scoring import token_logprobs_with_router_loss

    path = moe_path if model_type == "qwen2_moe" else routed_moe(tmp_path, model_type)
    with torch.no_grad():
        _, _, expected = token_logprobs_with_router_loss(_engine(path).raw, SEQS, 1.0)
    mlx = _engine(path, backend="mlx").raw
    router: list = []
    logp, _ = flat_logprobs(mlx, SEQS, 1.0, router=router)
    plain, _ = flat_logprobs(mlx, SEQS, 1.0)
    assert float(router[0]) == pytest.approx(float(expected), rel=1e-5)
    assert np.abs(np.array(logp) - np.array(plain)).max() < 1e-5
    alone = []  # one row at a time: not the same quantity (the padding is really left out)
    for s in SEQS:
        part: list = []
        flat_logprobs(mlx, [s], 1.0, router=part)
        alone.append(float(part[0]))
    assert abs(np.mean(alone) - float(router[0])) > 1e-4


def test_mlx_train_step_adds_coef_times_the_router_loss_as_torch_does(moe_path):
    """coef x the micro-batches' mean router loss is in the MLX step's loss, logged as ``aux_loss``
    (coef 0 logs none); loss, ``aux_loss``, gradient norm and the weights after the step are the
    torch backend's; with gradient checkpointing the term still reaches the gradient."""
    require_backends("mlx")
    off, after_off = _step(moe_path, 0.0, micro=1, backend="mlx")
    on, after_on = _step(moe_path, 0.5, micro=1, backend="mlx")
    torch_on, torch_after = _step(moe_path, 0.5, micro=1)
    assert "aux_loss" not in off.extra and not off.skipped and not on.skipped
    assert on.extra["aux_loss"] == pytest.approx(torch_on.extra["aux_loss"], rel=1e-5)
    assert on.loss - off.loss == pytest.approx(0.5 * on.extra["aux_loss"], rel=1e-4)
    assert on.loss == pytest.approx(torch_on.loss, rel=1e-5)
    assert on.grad_norm == pytest.approx(torch_on.grad_norm, rel=1e-4)
    assert largest_gap(after_off, after_on) > 1e-4, "the router term changed no gradient"
    assert largest_gap(after_on, torch_after) < 1e-4
    checkpointed, _ = _step(moe_path, 0.5, micro=1, backend="mlx", checkpointing=True)
    assert checkpointed.grad_norm == pytest.approx(on.grad_norm, rel=1e-5)
    assert checkpointed.extra["aux_loss"] == pytest.approx(on.extra["aux_loss"], rel=1e-6)


def test_mlx_unset_coefficient_is_the_model_configs_own(moe_path, tmp_path):
    """None on MLX: the config's router_aux_loss_coef (0.001); a config.json without one gets
    transformers' default for the model type, as the torch backend's config class reads it."""
    require_backends("mlx")

    from transformers import AutoConfig

    default, _ = _step(moe_path, None, backend="mlx")
    off, _ = _step(moe_path, 0.0, backend="mlx")
    assert default.extra["aux_loss"] > 0
    assert default.loss - off.loss == pytest.approx(0.001 * default.extra["aux_loss"], rel=1e-3)
    from polyrl_mlx.architectures import ROUTER_AUX_TYPES

    for model_type, coef in ROUTER_AUX_TYPES.items():
        assert AutoConfig.for_model(model_type).router_aux_loss_coef == coef
    bare = edited_copy(moe_path, tmp_path / "no-coefficient", {"router_aux_loss_coef": REMOVE})
    implicit, _ = _step(str(bare), None, backend="mlx")
    assert implicit.loss == pytest.approx(default.loss, rel=1e-6)
    assert implicit.extra["aux_loss"] == pytest.approx(default.extra["aux_loss"], rel=1e-6)


def _unsupported_moe(folder, coef: float | None) -> str:
    """A config.json of a MoE family the MLX backend reads no router of (Mixtral's), no weights:
    the check must come before anything loads."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 64}
    if coef is not None:
        config["router_aux_loss_coef"] = coef
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_mlx_refuses_a_moe_family_it_reads_no_router_of_before_any_model_loads(tmp_path, monkeypatch):
    """A MoE model whose mlx-lm router the MLX backend does not read, with a coefficient not 0
    (the model's own by default): the run is refused before any engine loads (so before the first
    rollout), naming the field; with the coefficient 0 the check passes; torch declares none."""
    require_backends("mlx")
    from polyrl import engines
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    monkeypatch.setattr(engines, "Engine", lambda *a, **k: pytest.fail("a model was loaded before the refusal"))

    def config(model: str, coef: float | None = None, backend: str = "mlx") -> RunConfig:
        return RunConfig.from_dict({
            "model": {"path": model}, "data": {"task": "arithmetic", "options": {"count": 8}},
            "rewards": [{"name": "numeric_match"}], "backends": {"train": backend},
            "algorithm": {} if coef is None else {"router_aux_loss_coef": coef},
            "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})

    for coef, model in [(None, _unsupported_moe(tmp_path / "own", 0.02)), (0.01, _unsupported_moe(tmp_path / "set", None))]:
        with pytest.raises(ConfigError, match="has no Mixture-of-Experts load-balancing loss") as err:
            Trainer(config(model, coef))
        assert err.value.field == "algorithm.router_aux_loss_coef" and "router_aux_loss_coef = 0" in err.value.fix
    registry = get_registry()
    engines.check_router_aux(config(_unsupported_moe(tmp_path / "off", 0.02), 0.0), registry,
                             str(tmp_path / "off"))
    engines.check_router_aux(config(_unsupported_moe(tmp_path / "torch", 0.02), backend="torch"), registry,
                             str(tmp_path / "torch"))


def test_mlx_micro_batch_without_a_token_to_train_still_counts_its_router_loss(moe_path):
    """A micro-batch whose tokens are all masked out (an episode's inserted tokens only) still
    holds its rows' router term and counts in the divisor, as on torch: same loss, ``aux_loss``
    and gradient norm, not a crash on the empty policy term."""
    require_backends("mlx")
    seqs = [SEQS[0], TokenSequence(SEQS[1].prompt_ids, SEQS[1].completion_ids,
                                   mask=np.zeros(len(SEQS[1].completion_ids), dtype=bool))]
    batch = TrainBatch(seqs, ADV[:2])
    mlx = _engine(moe_path, micro=1, backend="mlx").train_step(batch, Objective(router_aux_loss_coef=0.5))
    want = _engine(moe_path, micro=1).train_step(batch, Objective(router_aux_loss_coef=0.5))
    assert mlx.extra["aux_loss"] == pytest.approx(want.extra["aux_loss"], rel=1e-5)
    assert mlx.loss == pytest.approx(want.loss, rel=1e-5)
    assert mlx.grad_norm == pytest.approx(want.grad_norm, rel=1e-4)


def test_eval_loss_reads_the_moe_config_of_the_model_path_as_resolved(toy, tmp_path):
    """``model.path`` an alias or a Hub id: the router check read ``<model.path>/config.json``
    literally, found none, and ``eval.loss`` was computed (without the router term TRL's
    ``eval_loss`` holds) for a MoE model. It reads the resolved folder's config now."""
    import json

    from structlog.testing import capture_logs

    from polyrl.config import RunConfig
    from polyrl.hookspecs import hookimpl
    from polyrl.trainer import Trainer

    folder = tmp_path / "moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_moe", "num_experts": 4,
                                                     "output_router_logits": False, "router_aux_loss_coef": 0.001}))

    class Alias:
        @hookimpl
        def polyrl_resolve_model(self, name):
            return str(folder) if name == "my-moe" else None

    config = RunConfig.from_dict({
        "model": {"path": "my-moe"}, "backends": {"train": "toy"},
        "generation": {"group_size": 2, "max_new_tokens": 4}, "optimizer": {"lr": 1.0},
        "data": {"rows": [{"prompt": "p", "answer": "7"}] * 6}, "rewards": [{"name": "toy_sevens"}],
        "eval": {"count": 2, "reward": "run", "loss": True, "samples": 2, "greedy": False},
        "train": {"steps": 1, "prompts_per_step": 2, "output_dir": str(tmp_path / "run")}})
    with capture_logs() as logs:
        summary = Trainer(config, extra_plugins=(Alias(),)).run(progress=False)
    assert summary["steps"] == 1
    warned = [e["event"] for e in logs if e["event"].startswith("eval.loss is not computed")]
    assert len(warned) == 1, [e["event"] for e in logs][:40]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/reward" in line or "eval/sampled_reward_mean" in line for line in lines)  # it evaluated
    assert not any("eval/loss" in line for line in lines)


def test_a_coefficient_on_a_dense_model_is_refused_before_any_model_loads(tiny_model_dir, tmp_path, monkeypatch):
    """Before: torch's train_step raised it, so the error came after the first rollout (a whole
    generation later); the startup check covered only backends declaring router_aux_types."""
    from polyrl import engines
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    monkeypatch.setattr(engines, "Engine", lambda *a, **k: pytest.fail("a model was loaded before the refusal"))
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir}, "data": {"task": "arithmetic", "options": {"count": 8}},
        "rewards": [{"name": "numeric_match"}], "backends": {"train": "torch"},
        "algorithm": {"router_aux_loss_coef": 0.01},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError, match="not a Mixture-of-Experts model") as err:
        Trainer(config)
    assert err.value.field == "algorithm.router_aux_loss_coef" and "router_aux_loss_coef" in err.value.fix


def test_mlx_reports_trls_policy_loss_with_an_entropy_bonus_as_torch_does(moe_path):
    """With ``entropy_coef`` > 0 TRL logs ``policy_loss``: the loss without the entropy bonus and
    the router term, the KL term in. The torch backend reported it, MLX did not. On the same
    weights and batch (router term, KL term and bonus all on) both give the same ``policy_loss``,
    and it is the loss the same step has without a bonus, less its router term."""
    require_backends("mlx")
    ref = [lp - 0.1 for lp in _engine(moe_path).logprobs(SEQS, 1.0)]  # a KL term that is not 0
    batch = TrainBatch(SEQS, np.array([1.0, 0.5, -0.25]), ref_logprobs=ref)  # a policy term far from 0
    both = Objective(router_aux_loss_coef=0.5, beta=0.04, entropy_coef=0.05)
    without = Objective(router_aux_loss_coef=0.5, beta=0.04)
    mlx = _engine(moe_path, micro=1, backend="mlx").train_step(batch, both)
    want = _engine(moe_path, micro=1).train_step(batch, both)
    plain = _engine(moe_path, micro=1, backend="mlx").train_step(batch, without)
    assert not mlx.skipped and mlx.kl > 0
    assert abs(mlx.extra["policy_loss"]) > 0.1
    assert mlx.extra["policy_loss"] == pytest.approx(want.extra["policy_loss"], rel=1e-5, abs=1e-6)
    assert mlx.extra["policy_loss"] == pytest.approx(plain.loss - 0.5 * plain.extra["aux_loss"], rel=1e-5, abs=1e-6)
    assert abs(mlx.extra["policy_loss"] - mlx.loss) > 1e-3  # the bonus and router term are out of it
    assert "policy_loss" not in plain.extra  # TRL logs it with a bonus only


@pytest.mark.parametrize("micro", [None, 1], ids=["one-micro-batch", "a-micro-batch-of-a-prompt-alone"])
def test_a_prompt_only_row_counts_its_prompt_in_the_router_term_on_torch_and_mlx(moe_path, micro):
    """A completion cut under mask_truncated_completions reaches the backend as its prompt alone
    (``polyrl.router_rows``; TRL's attention mask covers the prompt, not the completion): no
    policy token, its prompt in its micro-batch's router term. The torch term is transformers'
    own over TRL's mask (prompt 1s, the cut completion 0s); MLX gives torch's loss, aux_loss,
    gradient norm and VESPO's phi mean (the row weighs 1 there, as in TRL's phi_seq). Before: MLX
    crashed on a micro-batch of such rows (logsumexp of no logits) and counted the row's weight 0."""
    require_backends("mlx")
    from transformers import AutoModelForCausalLM

    cut = SEQS[1]
    seqs = [SEQS[0], TokenSequence(cut.prompt_ids, np.zeros(0, dtype=np.int64)), SEQS[2]]
    batch = TrainBatch(seqs, np.array([1.0, 0.0, -0.5]))
    want = _engine(moe_path, micro=micro).train_step(batch, Objective(router_aux_loss_coef=0.5))
    got = _engine(moe_path, micro=micro, backend="mlx").train_step(batch, Objective(router_aux_loss_coef=0.5))
    assert not got.skipped and got.extra["aux_loss"] == pytest.approx(want.extra["aux_loss"], rel=1e-5)
    assert got.loss == pytest.approx(want.loss, rel=1e-5) and got.grad_norm == pytest.approx(want.grad_norm, rel=1e-4)
    vespo = Objective(policy_loss="vespo", router_aux_loss_coef=0.5)  # the row's weight: 1, as TRL's phi_seq
    phi = [_engine(moe_path, micro=micro, backend=b).train_step(batch, vespo).extra["vespo_phi_seq_mean"]
           for b in ("torch", "mlx")]
    assert phi[1] == pytest.approx(phi[0], rel=1e-5)
    if micro is None:  # one micro-batch: transformers' own term over TRL's attention mask
        model = AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()
        rows = [(s.prompt_ids, s.completion_ids, False) for s in (SEQS[0], SEQS[2])] + \
            [(cut.prompt_ids, cut.completion_ids, True)]
        wide_p, wide_c = max(len(p) for p, _, _ in rows), max(len(c) for _, c, _ in rows)
        ids = np.full((3, wide_p + wide_c), 3)
        mask = np.zeros(ids.shape, dtype=np.int64)
        for i, (p, c, is_cut) in enumerate(rows):
            ids[i, wide_p - len(p):wide_p], mask[i, wide_p - len(p):wide_p] = p, 1
            ids[i, wide_p:wide_p + len(c)], mask[i, wide_p:wide_p + len(c)] = c, 0 if is_cut else 1
        position = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
        with torch.no_grad():
            out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                        position_ids=torch.from_numpy(position), output_router_logits=True)
        assert want.extra["aux_loss"] == pytest.approx(float(out.aux_loss), rel=1e-5)
