"""A third-party polyrl backend in pure numpy, installed by the tests through a real entry point.

The "model" is a learnable table of next-token logits shared by every position (a unigram
policy over a 16-token vocabulary): small enough to train in milliseconds, real enough that the
core loop's generate -> reward -> advantage -> update path must work for its reward to rise.
Gradients are exact: ``polyrl.algorithms.reference.policy_loss_grad`` gives d loss / d logp, and
d logp_t / d logits = onehot(token_t) - softmax(logits).
"""

from __future__ import annotations

import numpy as np

from polyrl.algorithms.reference import policy_loss, policy_loss_grad
from polyrl.hookspecs import hookimpl
from polyrl.types import BackendSpec, Capabilities, Completion, StepMetrics

VOCAB = 16
EOS = 0


class ToyEngine:
    def __init__(self, config) -> None:
        self.config = config
        self.logits = np.zeros(VOCAB)
        self.lr = config.optimizer.lr

    @classmethod
    def load(cls, config) -> ToyEngine:
        return cls(config)

    def logp(self, temperature: float) -> np.ndarray:
        z = self.logits / (temperature or 1.0)
        return z - np.logaddexp.reduce(z)


def _prompt_ids(prompt) -> list[int]:
    text = prompt if isinstance(prompt, str) else " ".join(m["content"] for m in prompt)
    return [1 + (ord(ch) % (VOCAB - 1)) for ch in text[:8]]


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
    loss, metrics = policy_loss(*args)
    grads = policy_loss_grad(*args)
    probs = np.exp(logp)
    dlogits = np.zeros(VOCAB)
    for seq, g in zip(batch.sequences, grads):
        for tok, gt in zip(seq.completion_ids, g):
            dlogits += gt * (np.eye(VOCAB)[tok] - probs)
    norm = float(np.linalg.norm(dlogits))
    engine.logits -= engine.lr * dlogits
    return StepMetrics(loss=loss, grad_norm=norm, kl=metrics["kl"],
                       clip_fraction=metrics["clip_fraction"], tokens=batch.num_tokens)


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
def save_checkpoint(engine, path):
    if not isinstance(engine, ToyEngine):
        return None
    import os

    os.makedirs(path, exist_ok=True)
    np.save(os.path.join(path, "logits.npy"), engine.logits)
    return True


@hookimpl
def load_checkpoint(engine, path):
    if not isinstance(engine, ToyEngine):
        return None
    import os

    engine.logits = np.load(os.path.join(path, "logits.npy"))
    return True


@hookimpl
def polyrl_resolve_model(name):
    return "/" if name == "toy-model" else None


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
