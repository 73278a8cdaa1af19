"""The ``polyrl`` command: train | launch | backends | rewards | trackers | environments | doctor | generate | serve | bench |
convert | report | config-reference."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from polyrl import __version__
from polyrl.errors import PolyrlError, StoppedAtOnce

if TYPE_CHECKING:
    from pathlib import Path

    from polyrl.config import RunConfig

#: What the backends table's "can do" column lists (every ability is in ``--json``).
BACKEND_ABILITIES = ("generate", "logprobs", "train_step", "lora", "weight_import", "weight_export", "checkpoint",
                     "token_prompts", "loss_mask", "data_parallel")


#: What ``polyrl convert`` says when no backend took the conversion: the formats polyrl's own
#: backends write, from what, and the extra each needs (a third-party plugin may add others).
CONVERT_FIX = ("--to mlx converts a HF or MLX folder (pip install polyrl[mlx]); --to hf converts a .gguf file "
               "(pip install polyrl[torch]) or an MLX folder (pip install polyrl[mlx]); formats are lowercase")


#: ``polyrl report RUN_A RUN_B``'s chart unless --output says (in the current folder: it is no one run's)
COMPARE_PNG = "compare.png"


def _print_json(data: Any) -> None:
    """``data`` as strict JSON (NaN and infinities as null, ``strict_json``): a bare ``Infinity`` or
    ``NaN`` token, which ``json.dumps`` writes by default, fails jq and every strict reader."""
    from polyrl import strict_json

    print(strict_json.dumps(data, indent=2, default=str))


def _registry():
    from polyrl.registry import get_registry

    return get_registry()


def _plugin_output_aside() -> contextlib.AbstractContextManager[Any]:
    """While plugins load, register and probe for a listing, what they print goes to stderr: a
    plugin's import banner made ``--json`` output unparseable."""
    return contextlib.redirect_stdout(sys.stderr)


def _print_listing(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], errors: Iterable[Any],
                   what: str, footer: str = "") -> None:
    """A listing table, every cell plain text: a plugin's words (a summary, a reason, an import
    error) are never read as Rich markup (``pip install 'x[gpu]'`` lost its brackets, and
    ``[/docs]`` stopped the command with a MarkupError)."""
    from rich.table import Table
    from rich.text import Text

    console = _listing_console()
    table = Table(title=Text(title))
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))
    console.print(table)
    if footer:
        console.print(Text(footer))
    for e in errors:
        console.print(Text.assemble((f"{what} {e.name!r} ({e.distribution or 'unknown dist'}) failed to load:", "red"),
                                    " ", str(e.error)))


def _listing_console() -> Any:
    """A Rich console whose broken pipe is a ``BrokenPipeError`` for ``main`` to judge. Why: Rich's
    own answer is ``SystemExit(1)``, so `polyrl backends | head -1` ended with 1, a failure, where
    every other command whose reader left ends with ``STDOUT_READER_GONE_EXIT``."""
    import errno

    from rich.console import Console

    class ListingConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more is written; main says why the command ended
            raise BrokenPipeError(errno.EPIPE, "standard output's reader left")

    console = ListingConsole()
    if console.width < LISTING_MIN_WIDTH:  # COLUMNS=0 (a CI runner's, a script's) printed nothing, exit 0
        console.width = LISTING_FALLBACK_WIDTH
    return console


#: A listing drawn narrower than this is unreadable (COLUMNS=0 drew nothing): it is drawn
#: ``LISTING_FALLBACK_WIDTH`` wide instead, and the terminal wraps it.
LISTING_MIN_WIDTH = 20
LISTING_FALLBACK_WIDTH = 80


def _why_not(status: Any) -> str:
    """A listing's "why not / fix" cell: nothing for a usable entry, else the probe's reason and the
    install hint where there is one (a tracker without a hint showed "reason ()")."""
    if status.available:
        return ""
    return f"{status.reason}" + (f" ({status.install_hint})" if status.install_hint else "")


def _error_entries(errors: Iterable[Any]) -> list[dict[str, str]]:
    """The ``load_errors`` of a listing's or ``doctor``'s ``--json``: each plugin that failed to load."""
    return [{"name": e.name, "distribution": e.distribution, "error": e.error} for e in errors]


def _usable(status: Any) -> str:
    """A listing's "usable" cell."""
    return "yes" if status.available else "no"


class _PluginFamily(NamedTuple):
    """What ``polyrl rewards | trackers | environments`` lists of one plugin family (``_list_plugins``)."""

    group: str  # the registry's name for the family's plugins that failed to load
    entries: Callable[[Any], list[Any]]  # the registry's entries, in listing order
    as_json: Callable[[list[Any]], dict[str, Any]]  # their ``--json`` keys ("load_errors" is added)
    title: str
    columns: tuple[str, ...]
    row: Callable[[Any], tuple[Any, ...]]  # one entry's table cells
    what: str  # the plugins' kind, in the load errors below the table


_REWARDS = _PluginFamily(
    "rewards", lambda reg: reg.rewards(),
    lambda rewards: {"rewards": [{"name": r.name, "summary": r.summary, "distribution": r.distribution}
                                 for r in rewards]},
    "polyrl rewards ([[rewards]] name = ...)", ("reward", "from", "what it scores"),
    lambda r: (r.name, r.distribution, r.summary), "reward plugin")
_TRACKERS = _PluginFamily(
    "trackers", lambda reg: reg.tracker_statuses(), lambda statuses: {"trackers": [s.as_dict() for s in statuses]},
    "polyrl trackers ([logging] report_to = [...])", ("tracker", "usable", "from", "what it writes", "why not / fix"),
    lambda s: (s.name, _usable(s), s.distribution, s.summary, _why_not(s)), "tracker plugin")
_ENVIRONMENTS = _PluginFamily(
    "environments", lambda reg: reg.environment_statuses(),
    lambda statuses: {"environments": [s.as_dict() for s in statuses if s.kind == "environment"],
                      "tools": [s.as_dict() for s in statuses if s.kind == "tool"]},
    "polyrl environments ([environment] name = ..., tools = [...])",
    ("kind", "name", "usable", "from", "what it does", "why not / fix"),
    lambda s: (s.kind, s.name, _usable(s), s.distribution, s.summary, _why_not(s)), "environment/tool plugin")


def _list_plugins(args: argparse.Namespace, family: _PluginFamily) -> int:
    """One plugin family's listing: its entries and its plugins that failed to load, as a table or
    ``--json``, read with the plugins' own printing set aside (``_plugin_output_aside``)."""
    with _plugin_output_aside():
        reg = _registry()
        entries = family.entries(reg)
        errors = reg.load_errors_of(family.group)
    if args.json:
        _print_json({**family.as_json(entries), "load_errors": _error_entries(errors)})
        return 0
    _print_listing(family.title, family.columns, [family.row(e) for e in entries], errors, family.what)
    return 0


# --- commands -------------------------------------------------------------------------------------


def cmd_backends(args: argparse.Namespace) -> int:
    with _plugin_output_aside():
        reg = _registry()
        statuses = reg.statuses()
        errors = reg.load_errors
        rewards = reg.rewards()
    if args.json:
        _print_json({
            "env_warnings": list(reg.pm.env_warnings),
            "backends": [s.as_dict() for s in statuses],
            "rewards": [{"name": r.name, "summary": r.summary, "distribution": r.distribution}
                        for r in rewards],
            "load_errors": [{"name": e.name, "group": e.group, "distribution": e.distribution,
                             "error": e.error} for e in errors],
        })
        return 0
    rows = []
    for s in statuses:
        caps = [k for k in BACKEND_ABILITIES if s.capabilities.get(k)]
        rows.append((s.name, _usable(s), s.version, s.distribution, ", ".join(caps),
                     _why_not(s)))
    _print_listing("polyrl backends", ("backend", "usable", "version", "distribution", "can do", "why not / fix"),
                   rows, errors, "plugin", footer="\n".join(["rewards: " + ", ".join(r.name for r in rewards),
                                                             *(f"warning: {w}" for w in reg.pm.env_warnings)]))
    return 0


def cmd_rewards(args: argparse.Namespace) -> int:
    return _list_plugins(args, _REWARDS)


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from polyrl import report_compare
    from polyrl.logs import get_logger
    from polyrl.path_text import refuse_empty_path
    from polyrl.report import check_outputs, load_run, write_html, write_png

    # "" read as not given: --output "" drew the default chart, --html "" wrote no page, and both exited 0
    for flag, value, example in (("--output", args.output, "--output report.png"),
                                 ("--html", args.html, "--html report.html")):
        if value is not None:
            refuse_empty_path(value, flag, example)
    seen: dict[Path, str] = {}
    for run_dir in args.run_dir:  # one run twice was one entry of --json's metrics for two runs, without a word
        first = seen.setdefault(Path(run_dir).resolve(), run_dir)
        if first != run_dir or args.run_dir.count(run_dir) > 1:
            from polyrl.errors import ConfigError

            raise ConfigError(f"{run_dir!r} is given twice" + (f" (also as {first!r})" if first != run_dir else ""),
                              field="RUN_DIR", fix="name each run folder once")
    runs = [load_run(run_dir) for run_dir in args.run_dir]  # a folder that is no run: its error line, nothing drawn
    one = len(runs) == 1
    png_path = args.output or (Path(args.run_dir[0]) / "report.png" if one else Path(COMPARE_PNG))
    check_outputs(png_path, args.html)  # a folder without metrics is one error line before matplotlib loads
    names = report_compare.labels(runs, args.run_dir)
    for run in runs:
        for warning in run.warnings:
            get_logger("polyrl.report").warning(warning)
    for name, run in zip(names, runs):
        if run.unfinished and not args.json:
            print(f"not finished: {run.unfinished}" if one else f"not finished: {name}: {run.unfinished}")
    table = report_compare.summary(runs, names) if args.json or not one else {}
    png = write_png(runs[0], png_path) if one else report_compare.write_png(runs, names, png_path)
    if not args.json:
        if not one:
            print(report_compare.text_table(table, names))
        print(f"chart: {png}")
    page = None
    if args.html:
        page = write_html(runs[0], png, args.html) if one else report_compare.write_html(runs, names, table, png,
                                                                                         args.html)
    if args.json:
        _print_json({"runs": [{"name": n, "dir": str(d), "steps": len(r.lines), "unfinished": r.unfinished,
                               "left_out": list(r.warnings)}
                              for n, d, r in zip(names, args.run_dir, runs)],
                     "chart": str(png), "page": None if page is None else str(page), "metrics": table})
    elif page is not None:
        print(f"page: {page}")
    return 0


def cmd_trackers(args: argparse.Namespace) -> int:
    return _list_plugins(args, _TRACKERS)


def cmd_environments(args: argparse.Namespace) -> int:
    return _list_plugins(args, _ENVIRONMENTS)


def cmd_config_reference(args: argparse.Namespace) -> int:
    from polyrl.config_reference import render_markdown

    print(render_markdown(), end="")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from polyrl.serve import run

    return run(args)


def _doctor_report() -> dict[str, Any]:
    reg = _registry()
    report: dict[str, Any] = {
        "polyrl": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("POLYRL_", "OMP_", "MKL_", "HF_HUB_OFFLINE"))},
        "backends": {},
        "load_errors": _error_entries(reg.load_errors),
        "env_warnings": list(reg.pm.env_warnings),
    }
    for name in reg.names():
        status = reg.status(name)
        entry: dict[str, Any] = {"available": status.available, "reason": status.reason,
                                 "version": status.version, "distribution": status.distribution}
        if status.available and reg.spec(name).diagnostics is not None:
            entry["diagnostics"] = reg.diagnostics(name)
        report["backends"][name] = entry
    return report


def cmd_doctor(args: argparse.Namespace) -> int:
    with _plugin_output_aside():
        report = _doctor_report()
    if args.json:
        _print_json(report)
        return 0
    print(f"polyrl {report['polyrl']} on Python {report['python']} ({report['platform']}), "
          f"{report['cpu_count']} CPUs")
    for key, value in report["env"].items():
        print(f"  {key}={value}")
    for name, entry in report["backends"].items():
        mark = "ok " if entry["available"] else "NO "
        line = f"[{mark}] {name} {entry['version']} ({entry['distribution']})"
        if not entry["available"]:
            line += f": {entry['reason']}"
        print(line)
        for k, v in entry.get("diagnostics", {}).items():
            print(f"        {k}: {v}")
    for e in report["load_errors"]:
        print(f"[ERR] plugin {e['name']} ({e['distribution'] or 'unknown dist'}): {e['error']}")
    for text in report["env_warnings"]:
        print(f"[WARN] {text}")
    return 1 if report["load_errors"] or report["env_warnings"] else 0


def train_config(args: argparse.Namespace) -> RunConfig:
    """The config ``polyrl train`` runs: the file, its ``--set`` overrides, then ``--steps`` and
    ``--output-dir``, all validated. ``polyrl launch`` checks it too, before starting any rank."""
    import attrs

    from polyrl.config import RunConfig
    from polyrl.errors import ConfigError
    from polyrl.path_text import check_path_text

    if args.resume:  # a name past the file system's limit made the checkpoint lookup a traceback
        check_path_text(args.resume, "--resume")
        # "~" is the home folder, as in train.output_dir: a quoted "~/runs/x/..." (no shell to
        # expand it) was "does not exist"; expanded here, the ranks of `polyrl launch` get it too
        args.resume = os.path.expanduser(args.resume)
    config = RunConfig.from_toml(args.config, tuple(args.set))
    overrides: dict[str, Any] = {}
    if args.steps is not None:
        overrides["steps"] = args.steps
    if args.output_dir is not None:
        overrides["output_dir"] = args.output_dir
    # the key as --set reads it: "train . steps=5" set train.steps too, and --steps took over without a word
    set_keys = {".".join(part.strip() for part in item.partition("=")[0].split(".")) for item in args.set}
    for key in sorted(set_keys & {f"train.{name}" for name in overrides}):
        flag = "--" + key.removeprefix("train.").replace("_", "-")
        raise ConfigError(f"{flag} and --set {key}=... both set it", field=flag,
                          fix=f"give it once: drop one of {flag} and --set {key}")
    if overrides:
        config = attrs.evolve(config, train=attrs.evolve(config.train, **overrides))
    return config


def cmd_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from polyrl import checkpoint, run_lock
    from polyrl.errors import ConfigError

    config = train_config(args)
    if args.resume:  # a mistyped path is one line before any model loads
        wrong = checkpoint.not_a_checkpoint(Path(args.resume))
        if wrong:
            raise ConfigError(wrong[0], field="--resume", fix=wrong[1])
    resuming = args.resume is not None or args.resume_weights_only
    where = Path(config.train.output_dir)
    if os.environ.get("WORLD_SIZE", "1") in ("", "1"):
        # a running run's folder: refused before the models load, not after. Not under a launcher:
        # there rank 0 takes the lock and every rank refuses together (a rank leaving alone here had
        # torchrun kill the others before they said why; `polyrl launch` checks before any rank starts)
        run_lock.check_free(where)
    existed = where.is_dir()  # before the run takes its lock there
    try:
        summary, trainer = _train(config, args, resuming, where, existed)
    except KeyboardInterrupt:  # Ctrl-C before the run's own handler is in place (a model load)
        sys.stderr.write(_interrupted_line(args, where) + "\n")
        return 130
    summary.pop("history", None)
    if trainer.rank != 0:  # under a launcher every rank returns the same summary: print it once
        return 0
    from polyrl import strict_json

    print(strict_json.dumps(summary, indent=2, default=str))
    if summary.get("stopped_early") and "checkpoint" not in summary:  # during the evaluation before training
        print(f"stopped on request before the first step; nothing was trained or saved. Start again with: "
              f"{resume_command(args, resume=resuming)}", file=sys.stderr)
    elif summary.get("stopped_early"):
        print(f"stopped on request after step {summary['steps']}; checkpoint {summary['checkpoint']}. "
              f"Continue with: {resume_command(args)}", file=sys.stderr)
    return 0


def _train(config: RunConfig, args: argparse.Namespace, resuming: bool, where: Path,
           existed: bool) -> tuple[dict[str, Any], Any]:
    """Build the trainer, resume it when asked, and run it: (its summary, the trainer)."""
    from polyrl.global_rngs import seed_global_rngs
    from polyrl.trainer import Trainer

    # stdout holds the summary alone (`polyrl train x.toml > summary.json`): what a tracker library
    # (trackio's banner) or a reward prints during the run goes to stderr
    with contextlib.redirect_stdout(sys.stderr):
        seed_global_rngs(config.train.seed)  # a resume restores its checkpoint's states over these
        # the checkpoint is chosen and its saved config checked before any model loads
        trainer = Trainer(config, resume=(args.resume or "") if resuming else None,
                          weights_only=args.resume_weights_only)
        if resuming:
            resumed = trainer.resume(args.resume or None, weights_only=args.resume_weights_only)
            if not resumed:
                print(f"no complete checkpoint found in {where}"
                      f"{'' if existed else ' (the folder did not exist)'}; starting from the first step. "
                      "If a run should be there, check train.output_dir / --output-dir", file=sys.stderr)
        try:
            summary = trainer.run(progress=not args.no_progress)
        except PolyrlError as exc:  # after the error line: where the run can go on from, as on a stop
            exc.resume_note = _resume_note(trainer, args)  # type: ignore[attr-defined]
            raise
        except StoppedAtOnce as exc:
            _leave_at_once(trainer, args, exc)
    return summary, trainer


def _interrupted_line(args: argparse.Namespace, where: Path) -> str:
    """The line for a Ctrl-C the run's own handler did not see (it came while the models loaded):
    where the run goes on from. Why: "continues from its last checkpoint with --resume" was said
    of a run that had saved none, whose --resume then started it again from the first step."""
    from polyrl.checkpoint import latest_checkpoint

    try:
        newest = latest_checkpoint(where / "checkpoints")
    except OSError:
        newest = None
    if newest is not None:
        return f"interrupted (Ctrl-C); the run continues from checkpoint {newest} with: {resume_command(args)}"
    return f"interrupted (Ctrl-C) before the run saved anything; start it again with: {resume_command(args, resume=False)}"


def _leave_at_once(trainer: Any, args: argparse.Namespace, stop: StoppedAtOnce) -> NoReturn:
    """A second Ctrl-C: say which step was dropped and where the run continues, then exit 130 at
    once. ``os._exit``: a rollout sampled ahead (``generation.overlap``) runs on a thread the
    interpreter would wait for at exit, the very wait the second Ctrl-C refuses."""
    from polyrl.checkpoint import latest_checkpoint

    try:
        newest = latest_checkpoint(trainer.checkpoint_root)
    except OSError:
        newest = None
    if newest is not None:
        where = f"it continues from checkpoint {newest} with: {resume_command(args)}"
    else:
        where = f"no checkpoint was saved; start it again with: {resume_command(args, resume=False)}"
    sys.stderr.write(f"stopped at once (Ctrl-C twice) during {stop.phase}, which is not taken; {where}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(130)


def _resume_note(trainer: Any, args: argparse.Namespace) -> str | None:
    """The line after a failed run's error: its newest checkpoint and the command that continues
    from it (a reward failure checkpoints the state before its step; only a stop said so before)."""
    from polyrl.checkpoint import latest_checkpoint

    if getattr(trainer, "rank", 0) != 0 or not (trainer._resumed or trainer._saved_step is not None):
        return None  # this run saved nothing: checkpoints there are an earlier run's
    try:
        newest = latest_checkpoint(trainer.checkpoint_root)
    except OSError:
        return None
    if newest is None:
        return None
    return f"the run's newest checkpoint is {newest}; once the cause is fixed, continue with: {resume_command(args)}"


def resume_command(args: argparse.Namespace, resume: bool = True) -> str:
    """The command that continues this run: its config with the same ``--set``, ``--steps`` and
    ``--output-dir`` (without them it would resume the config's own output_dir, another run);
    ``resume=False``: the same run started again, for a stop before anything was saved."""
    import shlex

    words = ["polyrl", "train", str(args.config)]
    for override in args.set:
        words += ["--set", override]
    if args.steps is not None:
        words += ["--steps", str(args.steps)]
    if args.output_dir is not None:
        words += ["--output-dir", args.output_dir]
    return shlex.join([*words, "--resume"] if resume else words)


def _check_flags(args: argparse.Namespace, rules: dict[str, str]) -> None:
    """Command-line numbers get the same range rules as the config keys they mirror."""
    from polyrl.validators import RULES

    for flag, key in rules.items():
        value = getattr(args, flag)
        if value is not None:
            RULES[key].check(value, "--" + flag.replace("_", "-"))


def cmd_generate(args: argparse.Namespace) -> int:
    from polyrl.control_chars import engines_probe
    from polyrl.control_setup import check_config_text
    from polyrl.engine import Engine
    from polyrl.errors import ConfigError
    from polyrl.model_flag import flag_errors_named, resolve_flag_model
    from polyrl.text_validity import blank, blank_problem, check_prompt
    from polyrl.types import EngineConfig, SamplingParams

    _check_flags(args, {"max_new_tokens": "generation.max_new_tokens", "temperature": "generation.temperature",
                        "top_p": "generation.top_p", "top_k": "generation.top_k", "seed": "train.seed",
                        "threads": "train.threads"})
    if not 1 <= args.n <= 65536:  # generation.group_size's range: more would only fill memory for hours
        raise PolyrlError(f"--n must be an integer from 1 to 65536, got {args.n}. Fix: e.g. --n 4")
    if args.n > 1 and args.temperature == 0:  # greedy (the default): n copies of one completion, without a word
        raise ConfigError(f"--temperature 0 (greedy, the default) gives the {args.n} completions of --n {args.n} "
                          "identically", field="--n", fix="add a temperature > 0 to sample them, e.g. --temperature "
                                                          "1.0, or drop --n for the one greedy completion")
    # before the model loads: bytes that are not UTF-8 in the argument reach Python as surrogates
    check_prompt(args.prompt, "the command line", fix="pass the prompt as UTF-8 text (check the terminal's encoding)")
    if blank(args.prompt):  # a data file's rule too: "$UNSET" sampled from an empty prompt, with nothing said
        raise ConfigError(f"the prompt {blank_problem(args.prompt)}", field="prompt",
                          fix='pass the text to sample from, e.g. polyrl generate "What is 2 + 3?"')
    template_kwargs = _chat_template_kwargs(args.chat_template_kwargs, args.raw)
    reg = _registry()
    model = resolve_flag_model(reg, args.model)
    with flag_errors_named("--backend", "--model", "--threads"):  # the backend's words name model.path
        engine = Engine(reg, args.backend, EngineConfig(model=model, role="generate", threads=args.threads,
                                                        chat_template_kwargs=template_kwargs))
    prompt: Any = args.prompt if args.raw else [{"role": "user", "content": args.prompt}]
    probe = engines_probe([engine])  # a control character this model's tokenizer reads as another token
    if probe is not None:
        probe.check(args.prompt, "the command line", "the prompt", field="prompt")
        check_config_text(probe, None, template_kwargs, kwargs_field="--chat-template-kwargs")
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_p=args.top_p, top_k=args.top_k, seed=args.seed, n=args.n)
    completions = engine.generate([prompt], sampling)
    short = [len(c.completion_ids) for c in completions
             if c.finish_reason == "length" and len(c.completion_ids) < args.max_new_tokens]
    if short:  # the model's context ended the completion before --max-new-tokens did
        from polyrl.logs import get_logger

        get_logger("polyrl.generate").warning(
            f"the completion stopped at the model's context after {max(short)} tokens, before --max-new-tokens "
            f"{args.max_new_tokens}", fix="lower --max-new-tokens (prompt + completion must fit the model's context)")
    if args.json:
        _print_json([{"text": c.text, "completion_ids": c.completion_ids.tolist(),
                      "logprobs": c.logprobs.tolist(), "finish_reason": c.finish_reason}
                     for c in completions])
    else:
        for c in completions:
            print(c.text)
    return 0


def _chat_template_kwargs(given: str | None, raw: bool) -> dict[str, Any]:
    """``--chat-template-kwargs``: a JSON object of chat template variables, as the config's
    ``model.chat_template_kwargs`` takes them (``polyrl.chat_kwargs``); none when not given. Refused
    with ``--raw``, whose prompt no template renders (the variables would do nothing)."""
    from polyrl.chat_kwargs import checked
    from polyrl.errors import ConfigError

    flag = "--chat-template-kwargs"
    if given is None:
        return {}
    if raw:
        raise ConfigError("a --raw prompt is not rendered by the chat template, so its variables would do nothing",
                          field=flag, fix="drop --raw, or drop --chat-template-kwargs")
    try:
        value = json.loads(given)
    except ValueError as exc:
        raise ConfigError(f"{given!r} is not JSON ({exc})", field=flag,
                          fix="""pass a JSON object in single quotes, e.g. --chat-template-kwargs '{"enable_thinking": false}'""") from None
    return checked(value, flag, example="""e.g. --chat-template-kwargs '{"enable_thinking": false}'""")


def cmd_bench(args: argparse.Namespace) -> int:
    from polyrl.bench import run_bench

    result = run_bench(model=args.model, backends=args.backends, prompts=args.prompts,
                       group_size=args.group_size, max_new_tokens=args.max_new_tokens,
                       threads=args.threads, steps=args.steps, lora=args.lora, output=args.output,
                       generate_only=args.generate_only, trl=args.trl, hf_generate=args.hf_generate,
                       mlx_lm_lora=args.mlx_lm_lora, ignore_eos=args.ignore_eos,
                       compute_dtype=args.compute_dtype, device=args.device, interleave=args.interleave,
                       few_shot=args.few_shot)
    if args.json:
        _print_json(result)
    else:
        from polyrl.bench.report import print_table

        print_table(result)
        print(args.output)
    from polyrl.bench.report import every_side_failed

    failed = every_side_failed(result, args.output)
    if failed is not None:  # after the table and report: each side's line stays readable above it
        from polyrl.errors import BenchFailed

        raise BenchFailed(failed)
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from polyrl.backend_kit.convert_paths import check_destination
    from polyrl.errors import ConfigError
    from polyrl.model_flag import flag_errors_named
    from polyrl.path_text import check_path_text, refuse_empty_path

    refuse_empty_path(args.dst, "dst", "polyrl convert MODEL ./converted --to mlx")
    check_path_text(args.dst, "dst")  # the backend's exists()/mkdir raised on a name past 255 bytes
    check_destination(args.dst)  # every converter's: a file in the way was its crash, a full folder lost
    reg = _registry()
    src = reg.resolve_model(args.src, field="src")
    if not os.path.exists(os.path.expanduser(src)):  # each converter read it its own way (a hub URL built from it)
        raise ConfigError(f"{args.src!r} does not exist", field="src",
                          fix="give a model folder (config.json, tokenizer files, *.safetensors), a .gguf file "
                              "or a model alias")
    with flag_errors_named("--quantize-bits"):  # the converter's words name its argument quantize_bits
        converted = reg.convert_model(src, args.dst, args.to, args.quantize_bits)
    if not converted:  # "Fix: pip install polyrl[HF]" named an extra that does not exist
        raise ConfigError(f"no installed backend converts {args.src!r} to {args.to!r}", field="--to",
                          fix=CONVERT_FIX)
    print(converted)
    return 0


# --- parser ---------------------------------------------------------------------------------------


def _json_command(sub: Any, name: str, summary: str, func: Callable[[argparse.Namespace], int]) -> None:
    """A subcommand whose one option is ``--json`` (its answer as JSON instead of text)."""
    p = sub.add_parser(name, help=summary)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=func)


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too) whose ``--help`` and ``--version`` text goes to
    standard output unguarded. Why: argparse drops a failed write there (a full disk, a reader
    that left) and exits 0, so the text went nowhere and the command said it succeeded; here the
    failure reaches ``checked_stdout`` and ``main`` as every other command's does."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message and file is not None and file is sys.stdout:
            file.write(message)
        else:  # the usage and error lines on stderr: argparse's own way
            super()._print_message(message, file)


def build_parser() -> argparse.ArgumentParser:
    from polyrl.resume_flag import ResumeFlag

    parser = _Parser(prog="polyrl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"polyrl {__version__}")
    parser.add_argument("--log-json", action="store_true", help="JSON log lines on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train from a TOML config")
    p.add_argument("config")
    p.add_argument("--resume", action=ResumeFlag,
                   help="continue from the newest checkpoint that verifies (or the one given)")
    p.add_argument("--resume-weights-only", action="store_true",
                   help="continue from a checkpoint's weights alone: fresh optimizer and RNG, config "
                   "changes applied (for a checkpoint whose optimizer or RNG state is missing)")
    p.add_argument("--steps", type=int, help="override train.steps")
    p.add_argument("--output-dir", help="override train.output_dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. --set algorithm.beta=0.04 (repeatable; "
                   "VALUE is a TOML literal, else a string)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("launch", help="run `polyrl train` on several processes/nodes under torchrun")
    from polyrl.launch import add_arguments as launch_arguments, cmd_launch

    launch_arguments(p)
    p.set_defaults(func=cmd_launch)

    _json_command(sub, "backends", "list backends, whether they run here, and why not", cmd_backends)

    _json_command(sub, "rewards", "list the rewards a run config can name, and where they come from", cmd_rewards)

    _json_command(sub, "trackers", "list the experiment trackers [logging] report_to can name", cmd_trackers)

    _json_command(sub, "environments", "list the multi-turn environments and tools [environment] can name",
                  cmd_environments)

    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API (e.g. for a judge)")
    from polyrl.serve import add_arguments as serve_arguments

    serve_arguments(p)
    p.set_defaults(func=cmd_serve)

    _json_command(sub, "doctor", "check the installation", cmd_doctor)

    p = sub.add_parser("generate", help="sample from a model on a backend")
    p.add_argument("prompt")
    p.add_argument("--backend", default="torch")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--raw", action="store_true", help="no chat template")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--n", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                   help='extra variables for the chat template, as model.chat_template_kwargs, e.g. '
                        '\'{"enable_thinking": false}\' for Qwen3')
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("bench", help="time generation and train steps per backend, side by side")
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--backends", nargs="*", default=None, help="default: every usable backend")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lora", action="store_true")
    p.add_argument("--generate-only", action="store_true", help="time generation alone (e.g. MAX vs torch)")
    p.add_argument("--trl", action="store_true", help="also run TRL's GRPOTrainer on the same workload")
    p.add_argument("--mlx-lm-lora", action="store_true",
                   help="also run mlx-lm-lora's GRPO on the same workload (the MLX backend's peer)")
    p.add_argument("--hf-generate", action="store_true",
                   help="also time transformers' model.generate on the same prompts (generation baseline)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="every side samples exactly --max-new-tokens per completion (same work on each side)")
    p.add_argument("--few-shot", type=int, default=0,
                   help="solved examples before every prompt's question, the same on every side (long prompts: "
                        "~15 tokens each with SmolLM2's tokenizer)")
    p.add_argument("--compute-dtype", choices=["bfloat16"], default=None,
                   help="mixed precision: float32 weights, matmuls in this dtype, for polyrl's engines and TRL "
                        "(bf16=True) alike; utilisation is then against this dtype's matmul peak")
    p.add_argument("--device", default="auto",
                   help="every side's device: auto (CUDA, a GPU or Metal when there is one, else the CPU), "
                        "cpu, cuda, ...; the matmul peak is measured there too")
    p.add_argument("--interleave", action="store_true",
                   help="with --trl: run every side at once, stepping in turn (a machine whose speed drifts "
                        "slows both sides of a step pair alike); all sides' memory is resident together")
    p.add_argument("--output", default="bench/results.json", help="JSON report; the chart goes beside it (.png)")
    p.add_argument("--json", action="store_true", help="print the whole JSON report instead of the table")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("report", help="draw a run's curves (PNG) and an HTML page with its metrics table; "
                                      "several runs: compared side by side")
    p.add_argument("run_dir", nargs="+", help="the run's train.output_dir; two or more to compare them")
    p.add_argument("--output", default=None,
                   help=f"the PNG (default RUN_DIR/report.png; comparing runs, {COMPARE_PNG} here)")
    p.add_argument("--html", default=None, help="also write a self-contained HTML page here")
    p.add_argument("--json", action="store_true",
                   help="print each metric's first, last and best value per run as JSON instead of text")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("config-reference", help="print every TOML config key with its default (Markdown)")
    p.set_defaults(func=cmd_config_reference)

    p = sub.add_parser("convert", help="convert a model between backend formats")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--to", required=True, help="target format, e.g. mlx or hf")
    p.add_argument("--quantize-bits", type=int, default=None)
    p.set_defaults(func=cmd_convert)
    return parser


#: Seconds the interpreter's exit may wait for threads the run's plugin code left running before
#: the program leaves without them (``_leave_past_held_threads``).
EXIT_GRACE_S = 10.0
#: Seconds the exit handlers (``atexit``) get when the program leaves past such threads.
EXIT_HANDLERS_S = 10.0


def main(argv: list[str] | None = None) -> int:
    """The ``polyrl`` program. Run as the program (``argv`` None), its exit waits at most
    ``EXIT_GRACE_S`` for threads the run's plugin code left running (``_leave_past_held_threads``)."""
    if argv is None:
        from polyrl.thread_origins import record_starts

        record_starts()
    from polyrl import exit_status

    try:
        code = _main(argv)
    except BrokenPipeError:
        if not _stdout_reader_gone():
            exit_status.mark_failed()
            raise
        code = STDOUT_READER_GONE_EXIT
    except BaseException:  # a traceback: the exit handlers see a failure (exit_status)
        exit_status.mark_failed()
        raise
    if code != 0:
        exit_status.mark_failed()
    if argv is None:
        _leave_past_held_threads(code, EXIT_GRACE_S)
    return code


#: The exit code of a command whose standard output's reader left (`polyrl config-reference | head`):
#: what a shell reports for a program SIGPIPE ended, as for the Unix tools in a pipeline.
STDOUT_READER_GONE_EXIT = 141


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader closed it; if so, it is pointed at /dev/null so
    the interpreter's last flush does not fail again. Why: the command's output was cut short by
    its reader's choice (``head``, ``grep -q``), which is no error of the command's: no traceback.
    A broken pipe anywhere else (a plugin's socket, a child process) is an error as before."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, ValueError, OSError):  # no real descriptor behind stdout
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone


def _held_threads() -> list[Any]:
    """The threads besides the main one that the interpreter's exit waits for."""
    import threading

    main_thread = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main_thread and not t.daemon and t.is_alive()]


def _leave_past_held_threads(code: int, grace_s: float, poll_s: float = 0.1) -> None:
    """Leave with ``code`` once the interpreter's exit has waited ``grace_s`` for threads the run's
    plugin code left running (an environment's ``threading.Thread(daemon=False)`` that never ends,
    an executor's hung task: ``thread_origins``), saying which, and every other thread it waits for
    has ended. Why: the exit joins every such thread, so a finished run (its model written, its
    summary printed) never exited. Why wait for the others: they are the run's own and its
    libraries' (a tracker's last upload, a callback's push to the Hub, a writer thread), cut with
    their work half done when the program left 10 s after the command whatever the threads were.
    Leaving, the exit handlers (``atexit``: a tracker's last push, the log's last line) still run,
    within ``EXIT_HANDLERS_S``, since the interpreter runs them only after those joins. An exit
    that waits for nothing is left alone."""
    import threading
    import time

    from polyrl.thread_origins import runs_plugin_code

    def watch() -> None:
        time.sleep(grace_s)
        while True:
            held = _held_threads()
            if not held:
                return
            if all(runs_plugin_code(t) for t in held):
                break
            time.sleep(poll_s)  # the run's own threads first: they end when their work is done
        names = ", ".join(sorted(t.name for t in held))
        sys.stderr.write(f"warning: the command ended {grace_s:g} s ago but {len(held)} thread(s) the run's code "
                         f"started still run ({names}); leaving without them. Fix: start such threads with "
                         "daemon=True, or end them (an environment's episode_over, a tool's own timeout)\n")
        _run_exit_handlers(EXIT_HANDLERS_S)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    threading.Thread(target=watch, name="polyrl-exit-watch", daemon=True).start()


def _run_exit_handlers(timeout_s: float) -> None:
    """Run the ``atexit`` handlers (which ``os._exit`` skips) on a thread of their own, waiting at
    most ``timeout_s`` for them: one that hangs must not keep the program from leaving. W&B's
    end (``wandb.teardown``) runs on a thread of its own beside them (``_finish_wandb``)."""
    import atexit
    import threading
    import time

    def run() -> None:
        with contextlib.suppress(BaseException):  # each handler's error is printed by atexit itself
            atexit._run_exitfuncs()

    deadline = time.monotonic() + timeout_s
    wandb = _finish_wandb()
    runner = threading.Thread(target=run, name="polyrl-exit-handlers", daemon=True)
    runner.start()
    runner.join(timeout_s)
    if wandb is not None:
        wandb.join(max(0.0, deadline - time.monotonic()))
        if wandb.is_alive():
            sys.stderr.write(
                f"warning: W&B did not finish within {timeout_s:g} s as the program left: a W&B run not finished "
                "before (its tracker's close timed out, or the run's code started it) loses what W&B had not yet "
                "written to its run-*.wandb file (its last steps, up to one 32 KiB block, and the run's exit "
                "record) and what it had not uploaded. Fix: end the threads the run's code left running (the "
                "warning above), or raise logging.tracker_timeout_s so the tracker's own close finishes it\n")


def _finish_wandb() -> Any:
    """A started thread running ``wandb.teardown()`` (every W&B run not finished ends, its data
    written), or None when W&B was never imported. Why its own thread: W&B's ``atexit`` hook runs
    after the handlers registered later, one at a time, and one of those that hung (an
    environment's, a library's) kept it from running: the run-*.wandb file lost its last block of
    records and the run's end (W&B writes the file in 32 KiB blocks)."""
    import threading

    module = sys.modules.get("wandb")
    teardown = getattr(module, "teardown", None)
    if not callable(teardown):
        return None
    _one_wandb_teardown()

    def run() -> None:
        with contextlib.suppress(BaseException):  # W&B's own failure: nothing to add at exit
            teardown()

    thread = threading.Thread(target=run, name="polyrl-exit-wandb", daemon=True)
    thread.start()
    return thread


def _one_wandb_teardown() -> None:
    """Make W&B's service teardown run once, every other call waiting for it and answering as it
    did. Why: W&B 0.28's atexit hook calls ``ServiceConnection.teardown`` directly, beside
    ``wandb.teardown()`` on ``_finish_wandb``'s thread; the method checks a flag and sets it
    without a lock and raises "Already torn down." to the later caller. Overlapping, the atexit
    hook printed that AssertionError's traceback as the program left, or the thread ended at once
    while the hook's teardown still ran, so the exit took W&B as finished (no warning) and could
    cut its last records off; both past the flag check would publish the teardown and close the
    connection twice."""
    import threading

    connection = sys.modules.get("wandb.sdk.lib.service.service_connection")
    cls = getattr(connection, "ServiceConnection", None)
    original = getattr(cls, "teardown", None)
    if cls is None or not callable(original) or getattr(original, "_polyrl_once", False):
        return
    lock = threading.Lock()
    answers: dict[int, Any] = {}  # id(connection) -> what its teardown returned

    def teardown(self: Any, exit_code: int) -> Any:
        with lock:  # a second caller waits here until the first has torn the connection down
            if id(self) in answers:
                return answers[id(self)]
            if getattr(self, "_torn_down", False):  # torn down before the exit (a run's own teardown)
                return None
            answers[id(self)] = answer = original(self, exit_code)
            return answer

    teardown._polyrl_once = True  # type: ignore[attr-defined]
    cls.teardown = teardown


def _main(argv: list[str] | None) -> int:
    try:
        # inside the try: Ctrl-C while these imports run (the first half second) was a traceback
        from polyrl import logs

        logs.configure()  # first: a bad POLYRL_LOG_* is the one error line, before an import logs with it
        from polyrl.output_stream import checked_stdout

        # a failed write (a full disk, a closed standard output) is the error line below, not a
        # traceback; --help and --version's too (argparse's own writes drop a failure and exit 0)
        with checked_stdout():
            args = build_parser().parse_args(argv)
            if args.log_json:
                logs.configure(json=True)
            return int(args.func(args) or 0)
    except PolyrlError as exc:
        from polyrl.errors import one_line
        from polyrl.launch_errors import report

        full = str(exc)
        line = one_line(full)  # a library's multi-line text inside the message stays on this line
        if report(line, full=full):  # a rank under `polyrl launch`: the launcher prints the first rank's line once
            return 2
        # one write, newline included: ranks under torchrun share stderr, and print's separate
        # newline write let two ranks' lines run together
        note = getattr(exc, "resume_note", None)
        sys.stderr.write(f"error: {line}\n" + (f"{note}\n" if note else ""))
        sys.stderr.flush()
        return 2
    except KeyboardInterrupt:  # Ctrl-C before a command's own handler is in place (imports, a model load);
        # `polyrl train` says where its run goes on from itself (cmd_train)
        sys.stderr.write("interrupted (Ctrl-C)\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
