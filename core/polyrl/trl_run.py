"""What transformers' tracker integrations take from a TRL script's trainer when they open their run
(``polyrl.tracking.TrlRun``): ``args.run_name``, ``args.to_dict()`` over the model config (W&B's
config with a LoRA run's ``peft_config``, MLflow's params), ``args.to_json_string()`` and the model config's JSON (TensorBoard's ``args`` and
``model_config`` texts).

Why a module of its own: polyrl's trainer never holds TRL's model object (its backend loads the
folder), so the model config is read as TRL's trainer would hold it: the folder's config loaded in
the dtype TRL loads it in, or the object's own, with ``use_cache`` as transformers' ``Trainer``
sets it. Only built for a run that has trackers (``polyrl.trl``).
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

from polyrl.tracking.spec import TrlRun


def trl_run(args: Any, model_object: Any, model_path: str, dtype: str, peft_config: Any = None) -> TrlRun | None:
    """The ``TrlRun`` of a script's ``args`` (a ``trl.GRPOConfig``; None for polyrl's own
    ``GRPOConfig``, which has no ``to_dict``) and its model: ``model_object`` (None for a folder)
    or ``model_path`` loaded in ``dtype``, wrapped by peft's ``get_peft_model`` with ``peft_config``
    (TRL's LoRA) where given. W&B's and trackio's config then start with the ``PeftModel``'s
    ``peft_config`` (``{"default": LoraConfig(...)}``) and count its adapters in
    ``model/num_parameters``, as transformers' integrations log a ``PeftModel``; MLflow's params
    have neither, as its ``MLflowCallback`` logs neither."""
    if not callable(getattr(args, "to_dict", None)) or not callable(getattr(args, "to_json_string", None)):
        return None
    config = model_config(args, model_object, model_path, dtype)
    combined: dict[str, Any] = {**(config.to_dict() if config is not None else {}), **args.to_dict()}
    params = dict(combined)  # MLflow's: no peft_config, no parameter count
    if peft_config is not None:
        wrapped = peft_model(config, peft_config)
        count = None if wrapped is None else int(wrapped.num_parameters())
        adapters = None if wrapped is None else wrapped.peft_config
    else:
        count = num_parameters(model_object, config)
        adapters = getattr(model_object, "peft_config", None)  # a model that already holds adapters
    if adapters is not None:
        combined = {"peft_config": adapters, **combined}
    if count is not None:
        combined["model/num_parameters"] = count
    texts = {"args": args.to_json_string()}
    if config is not None:
        texts["model_config"] = config.to_json_string()
    project = getattr(args, "project", None)
    return TrlRun(run_name=getattr(args, "run_name", None), project=project if isinstance(project, str) else None,
                  config=combined, params=params, texts=texts, mlflow_parent=mlflow_parent(),
                  **mlflow_active())


#: the values transformers reads as true in ``$MLFLOW_NESTED_RUN`` (its ``ENV_VARS_TRUE_VALUES``)
_TRUE = frozenset({"1", "ON", "YES", "TRUE"})


def mlflow_parent() -> str | None:
    """The id of the MLflow run active in this thread when ``$MLFLOW_NESTED_RUN`` is true, which
    transformers' ``MLflowCallback`` nests its run under (``start_run(nested=True)``); None
    otherwise. MLflow is not imported for it: a process that never imported it has no active run."""
    if os.environ.get("MLFLOW_NESTED_RUN", "FALSE").upper() not in _TRUE:
        return None
    mlflow = sys.modules.get("mlflow")
    active = mlflow.active_run() if mlflow is not None else None
    return active.info.run_id if active is not None else None


def mlflow_active() -> dict[str, str]:
    """``TrlRun``'s ``mlflow_active`` and ``mlflow_active_uri``: the MLflow run active in this thread
    (the script's) and its tracking URI, when neither ``$MLFLOW_NESTED_RUN`` nor ``$MLFLOW_RUN_ID``
    is set. Why: transformers' ``MLflowCallback`` then starts no run and logs into that one (its
    ``setup``: ``start_run`` only when ``active_run()`` is None, nested or ``MLFLOW_RUN_ID``); polyrl
    opened a second, top-level run beside the script's."""
    if os.environ.get("MLFLOW_NESTED_RUN", "FALSE").upper() in _TRUE or os.environ.get("MLFLOW_RUN_ID"):
        return {}
    mlflow = sys.modules.get("mlflow")
    active = mlflow.active_run() if mlflow is not None else None
    if mlflow is None or active is None:
        return {}
    return {"mlflow_active": active.info.run_id, "mlflow_active_uri": mlflow.get_tracking_uri()}


def peft_model(config: Any, peft_config: Any) -> Any:
    """The ``PeftModel`` TRL trains (``get_peft_model(model, peft_config)``) built on the meta
    device from the model's config (no memory, no weights read): its ``peft_config`` (the user's
    with what peft fills in: ``base_model_name_or_path``, the target modules as a set...) and its
    parameter count, adapters included. None where the architecture cannot be built so (no count
    and no peft_config logged, rather than a wrong one)."""
    if config is None:
        return None
    try:
        import torch
        from peft import get_peft_model
        from transformers import AutoModelForCausalLM

        adapter = copy.deepcopy(peft_config)
        init = getattr(adapter, "init_lora_weights", True)
        if not isinstance(init, bool):  # PiSSA, OLoRA, LoftQ... read the weights, which meta has not
            adapter.init_lora_weights = False
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(copy.deepcopy(config))
            wrapped = get_peft_model(model, adapter)
        for each in wrapped.peft_config.values():  # the init the user asked for, as TRL's PeftModel holds it
            if hasattr(each, "init_lora_weights"):
                each.init_lora_weights = init
        return wrapped
    except Exception:  # noqa: BLE001 - an architecture or adapter peft cannot build here: left out
        return None


def model_config(args: Any, model_object: Any, model_path: str, dtype: str) -> Any:
    """The model's config as TRL's trainer holds it (None where polyrl has no folder to read it
    from: a polyrl model name, a folder without a transformers config): a copy of the object's own, or the folder's loaded in ``dtype``
    (TRL's ``model_init_kwargs`` dtype, its default float32), and ``use_cache`` set to
    ``args.use_cache``, as transformers' ``Trainer.__init__`` sets it on the model."""
    if model_object is not None and getattr(model_object, "config", None) is not None:
        config = copy.deepcopy(model_object.config)
    elif Path(model_path).is_dir():
        import torch
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)  # never the folder's own code
        except Exception:  # noqa: BLE001 - a folder transformers cannot read (a GGUF's): no model config, as
            return None  # transformers logs none for a model without one; the trackers still open
        config.dtype = getattr(torch, dtype)
    else:
        return None
    if hasattr(args, "use_cache"):
        config.use_cache = args.use_cache
    return config


def num_parameters(model_object: Any, config: Any) -> int | None:
    """transformers' ``model/num_parameters`` (``model.num_parameters()``): the object's, or the
    architecture's built on the meta device (no memory, no weights read); None when it cannot be
    built so (transformers leaves it out on an AttributeError too)."""
    if model_object is not None:
        counted = getattr(model_object, "num_parameters", None)
        return int(counted()) if callable(counted) else None
    if config is None:
        return None
    try:
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(copy.deepcopy(config))  # it may set fields of its own
        return int(model.num_parameters())
    except Exception:  # noqa: BLE001 - an architecture transformers cannot build here: left out, as it does
        return None
