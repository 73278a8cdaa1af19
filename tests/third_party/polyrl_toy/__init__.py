"""A third-party polyrl backend in pure numpy, installed by the tests through a real entry point.

The "model" is a learnable table of next-token logits shared by every position (a unigram
policy over a 16-token vocabulary): small enough to train in milliseconds, real enough that the
core loop's generate -> reward -> advantage -> update path must work for its reward to rise.
Gradients are exact: ``polyrl.algorithms.reference.policy_loss_grad`` gives d loss / d logp, and
d logp_t / d logits = onehot(token_t) - softmax(logits); the optimizer is AdamW as
``OptimizerConfig`` describes it (the conformance kit's gradient check relies on that).
``ToyPlugin`` is the same backend as a class under another name, for tests that change one hook.
"""

from __future__ import annotations

import os

import numpy as np

from polyrl.algorithms.reference import policy_loss, policy_loss_grad
from polyrl.schedules import lr_at
from polyrl.hookspecs import hookimpl
from polyrl.types import BackendSpec, Capabilities, Completion, StepMetrics

VOCAB = 16
EOS = 0


class ToyEngine:
    def __init__(self, config) -> None:
        self.config = config
        self.logits = np.zeros(VOCAB)
        self.lr = config.optimizer.lr
        self.m, self.v, self.t = np.zeros(VOCAB), np.zeros(VOCAB), 0

    @classmethod
    def load(cls, config) -> ToyEngine:
        return cls(config)

    def logp(self, temperature: float) -> np.ndarray:
        z = self.logits / (temperature or 1.0)
        return z - np.logaddexp.reduce(z)


def _prompt_ids(prompt) -> list[int]:
    text = prompt if isinstance(prompt, str) else " ".join(m["content"] for m in prompt)
    # an empty prompt is one start token, as polyrl's backends give it (backend_kit.tokens.given_a_start)
    return [1 + (ord(ch) % (VOCAB - 1)) for ch in text[:8]] or [1]


@hookimpl
def polyrl_register_backends(register):
    register(BackendSpec(
        name="toy", load=ToyEngine.load, summary="numpy unigram policy (test backend)",
        capabilities=Capabilities(generate=True, logprobs=True, train_step=True,
                                  weight_export=True, weight_import=True, checkpoint=True),
        version="0.0.1",
    ))


@hookimpl
def generate(engine, prompts, sampling):
    if not isinstance(engine, ToyEngine):
        return None
    rng = np.random.default_rng(sampling.seed)
    logp = engine.logp(sampling.temperature)
    out = []
    for i, prompt in enumerate(prompts):
        for _ in range(sampling.n):
            if sampling.temperature == 0:
                ids = [int(np.argmax(logp))] * sampling.max_new_tokens
            else:
                ids = []
                for _ in range(sampling.max_new_tokens):
                    tok = int(rng.choice(VOCAB, p=np.exp(logp)))
                    ids.append(tok)
                    if tok == EOS:
                        break
            reason = "stop" if ids and ids[-1] == EOS else "length"
            out.append(Completion(i, _prompt_ids(prompt), ids, logp[ids],
                                  text=" ".join(f"t{t}" for t in ids), finish_reason=reason))
    return out


@hookimpl
def logprobs(engine, sequences, temperature, reference):
    if not isinstance(engine, ToyEngine) or reference:
        return None
    logp = engine.logp(temperature)
    return [logp[s.completion_ids].astype(np.float32) for s in sequences]


@hookimpl
def train_step(engine, batch, objective):
    if not isinstance(engine, ToyEngine):
        return None
    logp = engine.logp(batch.temperature)
    lps = [logp[s.completion_ids] for s in batch.sequences]
    args = (lps, batch.advantages, objective, batch.old_logprobs, batch.ref_logprobs, batch.sampler_logprobs)
    counts = dict(zip(("num_sequences", "num_tokens"), batch.loss_counts))
    loss, metrics = policy_loss(*args, **counts)
    grads = policy_loss_grad(*args, **counts)
    probs = np.exp(logp)
    dlogits = np.zeros(VOCAB)
    for seq, g in zip(batch.sequences, grads):
        for tok, gt in zip(seq.completion_ids, g):
            dlogits += gt * (np.eye(VOCAB)[tok] - probs)
    norm = float(np.linalg.norm(dlogits))
    if not np.isfinite(loss) or not np.isfinite(norm):
        return StepMetrics(loss=float(loss), grad_norm=norm, skipped=True, tokens=batch.num_tokens)
    lr = _adamw(engine, dlogits, norm)
    return StepMetrics(loss=loss, grad_norm=norm, kl=metrics["kl"],
                       clip_fraction=metrics["clip_fraction"], tokens=batch.num_tokens,
                       extra={"lr": lr, **{k: metrics[k] for k in CLIP_EXTRA if k in metrics}})


#: the reference's clip region fractions and per-completion extremes, reported as the torch backend does
CLIP_EXTRA = ("clip_low_fraction", "clip_high_fraction", "clip_low_min", "clip_high_max")


def _adamw(engine: ToyEngine, grad: np.ndarray, norm: float) -> float:
    """One AdamW update at the schedule's lr for it (returned)."""
    opt = engine.config.optimizer
    lr = lr_at(opt, engine.t)
    if opt.max_grad_norm is not None and norm > opt.max_grad_norm:
        grad = grad * (opt.max_grad_norm / norm)
    b1, b2 = opt.betas
    engine.t += 1
    engine.m = b1 * engine.m + (1 - b1) * grad
    engine.v = b2 * engine.v + (1 - b2) * grad**2
    m_hat, v_hat = engine.m / (1 - b1**engine.t), engine.v / (1 - b2**engine.t)
    engine.logits *= 1 - lr * opt.weight_decay
    engine.logits -= lr * m_hat / (np.sqrt(v_hat) + opt.eps)
    return lr


@hookimpl
def export_weights(engine):
    return {"logits": engine.logits.copy()} if isinstance(engine, ToyEngine) else None


@hookimpl
def import_weights(engine, weights):
    if not isinstance(engine, ToyEngine):
        return None
    engine.logits = np.asarray(weights["logits"], dtype=np.float64).copy()
    return True


@hookimpl
def save_checkpoint(engine, path, state_path=None):
    if not isinstance(engine, ToyEngine):
        return None
    import os

    os.makedirs(path, exist_ok=True)
    np.save(os.path.join(path, "logits.npy"), engine.logits)
    state = state_path or path
    os.makedirs(state, exist_ok=True)
    np.savez(os.path.join(state, "adam.npz"), m=engine.m, v=engine.v, t=engine.t)
    return True


@hookimpl
def load_checkpoint(engine, path, state_path=None, weights_only=False):
    if not isinstance(engine, ToyEngine):
        return None
    import os

    engine.logits = np.load(os.path.join(path, "logits.npy"))
    adam = os.path.join(state_path or path, "adam.npz")
    if not weights_only and os.path.exists(adam):
        with np.load(adam) as saved:
            engine.m, engine.v, engine.t = saved["m"], saved["v"], int(saved["t"])
    return True


@hookimpl
def polyrl_resolve_model(name):
    # a folder that exists and holds no model: the toy reads nothing from it
    return os.path.dirname(os.path.abspath(__file__)) if name == "toy-model" else None


@hookimpl
def polyrl_register_rewards(register):
    from polyrl.types import RewardSpec

    register(RewardSpec(name="toy_sevens", summary="fraction of tokens equal to 7"))


@hookimpl
def reward(prompts, completions, context):
    if "toy_sevens" not in context.wanted:
        return None
    return {"toy_sevens": [float(np.mean(c.completion_ids == 7)) if len(c.completion_ids) else 0.0
                           for c in completions]}


class ToyPlugin:
    """The toy backend registered as ``name``: subclass it and override one hook to build a
    backend with a known fault (the conformance kit's mutation tests do)."""

    capabilities = Capabilities(generate=True, logprobs=True, train_step=True,
                                weight_export=True, weight_import=True, checkpoint=True)

    def __init__(self, name: str = "toy-variant") -> None:
        self.name = name

    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name=self.name, load=ToyEngine.load, capabilities=self.capabilities,
                             distribution="tests"))

    @hookimpl
    def generate(self, engine, prompts, sampling):
        return generate(engine, prompts, sampling)

    @hookimpl
    def logprobs(self, engine, sequences, temperature, reference):
        return logprobs(engine, sequences, temperature, reference)

    @hookimpl
    def train_step(self, engine, batch, objective):
        return train_step(engine, batch, objective)

    @hookimpl
    def export_weights(self, engine):
        return export_weights(engine)

    @hookimpl
    def import_weights(self, engine, weights):
        return import_weights(engine, weights)

    @hookimpl
    def save_checkpoint(self, engine, path, state_path):
        return save_checkpoint(engine, path, state_path)

    @hookimpl
    def load_checkpoint(self, engine, path, state_path, weights_only):
        return load_checkpoint(engine, path, state_path, weights_only)
