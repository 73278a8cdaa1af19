"""A BERT/DistilBERT sequence classifier written in MAX's Graph API (reward models).

Why the Graph API and not ``max.pipelines``: MAX's pipelines serve decoders (and a few embedding
models), not ``*ForSequenceClassification`` heads, so the encoder is spelled out here: embeddings
(+ token types for BERT) and LayerNorm, post-LN blocks of multi-head self-attention and a GELU
MLP, the first token pooled through BERT's tanh pooler or DistilBERT's ReLU pre-classifier, then
the classifier. Checked against transformers on the same weights (``tests/test_max_reward.py``).

The weights are graph *inputs*, not constants: the compiled graph depends only on the shapes
(hidden size, heads, layers, labels; vocabulary and position counts are symbolic), so another
checkpoint of the same shape reuses the compile cache, and no weight is baked into the cache
folder. Batch and sequence length are symbolic too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from polyrl_max.arrow_first import set_up_arrow_first


@attrs.define(frozen=True)
class EncoderShape:
    """What the graph is compiled for (read from the HF ``config.json``)."""

    kind: str  # "bert" or "distilbert"
    hidden: int
    heads: int
    layers: int
    intermediate: int
    labels: int
    eps: float
    gelu: str  # "none" (exact) or "tanh"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EncoderShape:
        kind = config.get("model_type")
        if kind == "bert":
            act = config.get("hidden_act", "gelu")
            return cls(kind, config["hidden_size"], config["num_attention_heads"],
                       config["num_hidden_layers"], config["intermediate_size"],
                       int(config.get("num_labels") or len(config.get("id2label") or {0: 0})),
                       float(config.get("layer_norm_eps", 1e-12)), _gelu(act))
        if kind == "distilbert":
            act = config.get("activation", "gelu")
            return cls(kind, config["dim"], config["n_heads"], config["n_layers"], config["hidden_dim"],
                       int(config.get("num_labels") or len(config.get("id2label") or {0: 0})),
                       1e-12, _gelu(act))
        raise ValueError(f"model_type {kind!r} is not a BERT/DistilBERT encoder")


def _gelu(act: str) -> str:
    if act in ("gelu", "gelu_python"):
        return "none"
    if act in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return "tanh"
    raise ValueError(f"activation {act!r} is not supported (gelu or gelu_new)")


def weight_names(shape: EncoderShape) -> list[str]:
    """HF parameter names, in the order the graph takes them as inputs."""
    if shape.kind == "bert":
        names = ["bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
                 "bert.embeddings.token_type_embeddings.weight",
                 "bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias"]
        for i in range(shape.layers):
            p = f"bert.encoder.layer.{i}."
            names += [p + f"attention.self.{m}.{t}" for m in ("query", "key", "value") for t in ("weight", "bias")]
            names += [p + "attention.output.dense.weight", p + "attention.output.dense.bias",
                      p + "attention.output.LayerNorm.weight", p + "attention.output.LayerNorm.bias",
                      p + "intermediate.dense.weight", p + "intermediate.dense.bias",
                      p + "output.dense.weight", p + "output.dense.bias",
                      p + "output.LayerNorm.weight", p + "output.LayerNorm.bias"]
        return names + ["bert.pooler.dense.weight", "bert.pooler.dense.bias",
                        "classifier.weight", "classifier.bias"]
    names = ["distilbert.embeddings.word_embeddings.weight",
             "distilbert.embeddings.position_embeddings.weight",
             "distilbert.embeddings.LayerNorm.weight", "distilbert.embeddings.LayerNorm.bias"]
    for i in range(shape.layers):
        p = f"distilbert.transformer.layer.{i}."
        names += [p + f"attention.{m}.{t}" for m in ("q_lin", "k_lin", "v_lin") for t in ("weight", "bias")]
        names += [p + "attention.out_lin.weight", p + "attention.out_lin.bias",
                  p + "sa_layer_norm.weight", p + "sa_layer_norm.bias",
                  p + "ffn.lin1.weight", p + "ffn.lin1.bias", p + "ffn.lin2.weight", p + "ffn.lin2.bias",
                  p + "output_layer_norm.weight", p + "output_layer_norm.bias"]
    return names + ["pre_classifier.weight", "pre_classifier.bias", "classifier.weight", "classifier.bias"]


#: the tensors of the classification head (and BERT's pooler, which only the head uses): what a
#: base encoder or masked-LM folder lacks
HEAD_PREFIXES = ("classifier.", "pre_classifier.", "bert.pooler.")


class MissingWeight(KeyError):
    """A tensor the classifier needs that the folder's safetensors lack (``args[0]``: its name)."""

    def is_head(self) -> bool:
        """Whether it is the classification head's: the folder is no sequence classifier at all."""
        return str(self.args[0]).startswith(HEAD_PREFIXES)


def load_weights(folder: Path, shape: EncoderShape) -> list[np.ndarray]:
    """The graph's weight inputs from the folder's safetensors (Linear weights transposed once)."""
    from safetensors.numpy import load_file

    tensors: dict[str, np.ndarray] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    if not tensors:
        raise FileNotFoundError(f"no .safetensors weights in {folder}")
    names = weight_names(shape)
    if missing := [name for name in names if name not in tensors]:  # the head's first: is it a classifier?
        raise MissingWeight(next((name for name in missing if name.startswith(HEAD_PREFIXES)), missing[0]))
    out = []
    for name in names:
        value = np.asarray(tensors[name], dtype=np.float32)
        if name.endswith(".weight") and value.ndim == 2 and "embeddings" not in name:
            value = value.T  # Linear: y = x @ W.T + b; the graph multiplies by W.T directly
        out.append(np.ascontiguousarray(value))
    return out


def build_graph(shape: EncoderShape, weights: Sequence[np.ndarray]) -> Any:
    """The classifier graph: (input_ids, token_type_ids, position_ids, mask, *weights) -> logits."""
    from max.dtype import DType
    from max.graph import DeviceRef, Graph, TensorType, ops

    cpu = DeviceRef.CPU()
    index_type = TensorType(DType.int64, ("batch", "seq"), device=cpu)
    inputs = [index_type, index_type, index_type, TensorType(DType.float32, ("batch", "seq"), device=cpu)]
    # embedding tables get symbolic rows: vocabulary and position count do not change the graph
    names = weight_names(shape)
    inputs += [TensorType(DType.float32, (f"rows_{i}", w.shape[1]) if "embeddings." in n and w.ndim == 2
                          else w.shape, device=cpu)
               for i, (n, w) in enumerate(zip(names, weights))]
    head_dim = shape.hidden // shape.heads
    with Graph(f"polyrl_{shape.kind}_classifier", input_types=inputs) as graph:
        ids, types, positions, mask, *params = (v.tensor for v in graph.inputs)
        it = iter(params)

        def take() -> Any:
            return next(it)

        def linear(x: Any) -> Any:
            w, b = take(), take()
            return ops.matmul(x, w) + b

        def norm(x: Any) -> Any:
            gamma, beta = take(), take()
            return ops.layer_norm(x, gamma, beta, shape.eps)

        batch, seq = ids.shape[0], ids.shape[1]
        word, pos = take(), take()
        x = ops.gather(word, ids, axis=0) + ops.gather(pos, positions, axis=0)
        if shape.kind == "bert":
            x = x + ops.gather(take(), types, axis=0)
        x = norm(x)
        # additive mask: 0 where attended, a large negative number on padding: [batch, 1, 1, seq]
        bias = ops.reshape((mask - 1.0) * 1e9, [batch, 1, 1, seq])
        scale = 1.0 / float(np.sqrt(head_dim))

        def heads(t: Any) -> Any:
            return ops.permute(ops.reshape(t, [batch, seq, shape.heads, head_dim]), [0, 2, 1, 3])

        for _ in range(shape.layers):
            q, k, v = heads(linear(x)), heads(linear(x)), heads(linear(x))
            scores = ops.matmul(q, ops.permute(k, [0, 1, 3, 2])) * scale + bias
            context = ops.matmul(ops.softmax(scores, axis=-1), v)
            context = ops.reshape(ops.permute(context, [0, 2, 1, 3]), [batch, seq, shape.hidden])
            x = norm(x + linear(context))
            hidden = ops.gelu(linear(x), approximate=shape.gelu)
            x = norm(x + linear(hidden))
        first = ops.squeeze(ops.slice_tensor(x, [slice(None), slice(0, 1), slice(None)]), 1)
        pooled = linear(first)
        pooled = ops.tanh(pooled) if shape.kind == "bert" else ops.relu(pooled)
        graph.output(linear(pooled))
    return graph


class EncoderClassifier:
    """A compiled classifier plus its weights; ``logits(ids, mask)`` runs a padded batch."""

    def __init__(self, folder: str | Path) -> None:
        from max import engine
        from max.driver import CPU

        self.folder = Path(folder)
        config = json.loads((self.folder / "config.json").read_text())
        self.shape = EncoderShape.from_config(config)
        self.pad_position = 0
        self.weights = load_weights(self.folder, self.shape)
        # the classifier's rows are the label count (config.json may omit num_labels)
        self.shape = attrs.evolve(self.shape, labels=int(self.weights[-1].shape[0]))
        self.max_positions = int(self.weights[1].shape[0])
        set_up_arrow_first()  # before MAX runs anything: see arrow_first
        session = engine.InferenceSession(devices=[CPU()])
        self.model = session.load(build_graph(self.shape, self.weights))

    def logits(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[batch, labels] float32 for right-padded ``ids`` with ``mask`` (1 = token, 0 = padding)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.shape[1] > self.max_positions:
            raise ValueError(f"{ids.shape[1]} tokens, more than the model's {self.max_positions} positions")
        positions = np.ascontiguousarray(np.broadcast_to(np.arange(ids.shape[1], dtype=np.int64), ids.shape))
        types = np.zeros_like(ids)
        mask = np.ascontiguousarray(mask, dtype=np.float32)
        out = self.model.execute(ids, types, positions, mask, *self.weights)
        return np.asarray(out[0].to_numpy(), dtype=np.float32)
