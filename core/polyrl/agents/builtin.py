"""The core's own tools and environment, registered through the same hooks a third party uses.

Tools:
    ``calculator(expression)``  arithmetic parsed with ``ast`` (never ``eval``), bounded in size
    ``python(code)``            runs code in the code sandbox (``polyrl.sandbox``): fresh process,
                                no network, time/memory/output limits; answers with its output
Environment:
    ``guess_number``            find a secret integer with "higher"/"lower" feedback; reward 1 on
                                success, 0 when the guesses run out
"""

from __future__ import annotations

import ast
import json
import math
import operator
import random
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from polyrl.agents.spec import EnvironmentSpec, Message, Observation, ToolSpec
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl

# --- calculator --------------------------------------------------------------------------------------

MAX_EXPRESSION_CHARS = 1000
MAX_INT_BITS = 4096  # about 1200 decimal digits: enough for any arithmetic a model should need
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


def _bits(value: int | float) -> float:
    return value.bit_length() if isinstance(value, int) else math.log2(abs(value) + 1) + 1


def _check_size(op: type, left: int | float, right: int | float) -> None:
    """Refuse, before computing, a result that would be too large to be worth computing."""
    if op is ast.Pow:
        if abs(right) > MAX_INT_BITS:
            raise ValueError(f"exponent {right} is too large (at most {MAX_INT_BITS})")
        if isinstance(left, int) and isinstance(right, int) and right > 0 and _bits(left) * right > MAX_INT_BITS:
            raise ValueError(f"{left} ** {right} is too large (more than {MAX_INT_BITS} bits)")
    elif op is ast.Mult and isinstance(left, int) and isinstance(right, int):
        if _bits(left) + _bits(right) > MAX_INT_BITS:
            raise ValueError(f"the product is too large (more than {MAX_INT_BITS} bits)")


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        _check_size(type(node.op), left, right)
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError(f"division by zero in {_SYMBOL[type(node.op)]}") from None
        except OverflowError:
            raise ValueError("the result is too large for a float") from None
        if isinstance(result, complex):
            raise ValueError("the result is not a real number (a negative number to a fractional power)")
        if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
            raise ValueError(f"the result is too large (more than {MAX_INT_BITS} bits)")
        return result
    shown = ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__
    raise ValueError(f"{shown!r} is not allowed: use numbers, + - * / // % ** and parentheses")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly (integers stay exact).

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "(3 + 4) * 2 ** 10".
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot read {expression.strip()[:80]!r} as arithmetic ({exc.msg})") from None
    result = _evaluate(tree)
    if isinstance(result, float) and not math.isfinite(result):
        raise ValueError("the result is not a finite number")
    return repr(result)


# --- python --------------------------------------------------------------------------------------------

PYTHON_TIMEOUT_S = 10.0
_sandbox: Any = None
_isolation = "auto"  # ``environment.python_isolation``: the same levels and default as code_tests'
_sandbox_lock = threading.Lock()


def configure_python_tool(isolation: str) -> Any:
    """Build the tool's sandbox now with this ``isolation`` (``polyrl.sandbox.isolation``), so a
    machine where it cannot isolate is refused at setup (RewardError), not at the first tool call
    mid-rollout, where the model would run (and read back) the trainer's files and keys."""
    global _sandbox, _isolation
    with _sandbox_lock:
        if _isolation != isolation:
            _sandbox, _isolation = None, isolation
    return _python_sandbox()


def _python_limits() -> Any:
    from polyrl.sandbox import SandboxLimits

    return SandboxLimits(timeout_s=PYTHON_TIMEOUT_S, memory_mb=1024, max_output_bytes=65536)


def _python_sandbox() -> Any:
    """One sandbox for the process (building it probes the isolation available here)."""
    global _sandbox
    with _sandbox_lock:
        if _sandbox is None:
            from polyrl.sandbox import Sandbox

            _sandbox = Sandbox(_python_limits(), isolation=_isolation)
        return _sandbox


def python_tool_refusal(message: str) -> tuple[str, str | None]:
    """The sandbox's refusal (a RewardError's text) in the python tool's words: (problem, fix),
    naming ``python_isolation``. One wording for the setup error and the listing."""
    problem, _, fix = message.replace('isolation = "', 'python_isolation = "').partition(". Fix: ")
    return f"the python tool's {problem.removeprefix('code sandbox: ')}", fix or None


def _probe_python() -> str | None:
    """Why the tool cannot run here with the run's ``python_isolation`` ("auto" until a run sets
    it), or None: the check setup makes (``polyrl.sandbox.runner.refusal``, the same cached
    choice), so ``polyrl environments`` does not list as usable a tool every run would be refused."""
    from polyrl.sandbox import runner

    with _sandbox_lock:
        isolation = _isolation
    why = runner.refusal(_python_limits(), isolation=isolation)
    if why is None:
        return None
    problem, fix = python_tool_refusal(why)
    return f"{problem}. Fix: {fix}" if fix else problem


#: Statements that print the REPL value, appended after the program's last expression.
_SHOW_VALUE = "\nif __polyrl_value is not None:\n    print(repr(__polyrl_value))\n"
#: One source line with its end, as Python's tokenizer ends lines (LF, CRLF or CR; not str.splitlines'
#: form feeds or line separators, which are no line ends in Python).
_SOURCE_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


def _print_last_expression(code: str) -> str:
    """Like a REPL: a trailing expression is printed (models expect ``2 + 3`` to answer 5).

    Only the last statement's text changes, in place (the model's other lines and comments stay as
    written, so a traceback's line numbers are the model's). Why not ``ast.unparse``: this runs in
    the trainer on the model's text, and unparsing a program the sandbox compiles fine (an expression
    nested ~900 deep) raised RecursionError here, so the tool answered "raised RecursionError" and
    never ran it. Code the trainer cannot parse (a syntax error, nesting past its parser's limits:
    RecursionError, MemoryError) goes as written, and the sandbox reports what its compiler says."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr) or last.end_lineno is None or last.end_col_offset is None:
        return code
    call = last.value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
        return code
    starts = [0]
    for match in _SOURCE_LINE.finditer(code):
        if match.end() == match.start():
            break
        starts.append(match.end())

    def index(lineno: int, col: int) -> int:  # ast columns count UTF-8 bytes
        line = code[starts[lineno - 1]:starts[lineno] if lineno < len(starts) else len(code)]
        return starts[lineno - 1] + len(line.encode("utf-8", "surrogatepass")[:col].decode("utf-8", "surrogatepass"))

    try:
        begin, end = index(last.lineno, last.col_offset), index(last.end_lineno, last.end_col_offset)
        shown = f"{code[:begin]}__polyrl_value = ({code[begin:end]}\n){code[end:]}{_SHOW_VALUE}"
        ast.parse(shown)  # the rewrite must read as the model's program did, else it goes as written
    except (SyntaxError, ValueError, RecursionError, MemoryError, IndexError, UnicodeError):
        return code
    return shown


def python(code: str) -> str:
    """Run Python code in a fresh sandboxed interpreter and return what it printed.

    Each call starts from scratch (no state is kept between calls). No network, no files outside
    a private temporary folder, a time limit of a few seconds. The value of a last bare
    expression is printed, as in a REPL.

    Args:
        code: The Python program to run.
    """
    result = _python_sandbox().run(_print_last_expression(code), [])
    output = result.output
    if result.status == "ok":
        return output
    if result.status == "error":
        return f"{output}error: {result.error}"
    if result.status == "timeout":
        return f"{output}error: the program ran past {PYTHON_TIMEOUT_S:g} s and was stopped"
    if result.status == "output_limit":
        return f"{output[:2000]}\nerror: the program printed too much and was stopped"
    return f"{output}error: the program crashed ({result.error or 'no detail'})"


# --- guess_number ----------------------------------------------------------------------------------------

GUESS_DEFAULTS: dict[str, Any] = {"low": 1, "high": 100, "max_guesses": 7, "secret_column": "secret",
                                  "seed": 0, "reward": 1.0}
_INTEGER = re.compile(r"-?\d+")


def _guess_options(options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(GUESS_DEFAULTS))
    if unknown:
        raise ConfigError(f"guess_number has no option(s) {', '.join(unknown)}", field="environment.options",
                          fix=f"use only {', '.join(GUESS_DEFAULTS)}")
    opts = {**GUESS_DEFAULTS, **options}
    for key in ("low", "high", "max_guesses", "seed"):
        if type(opts[key]) is not int:
            raise ConfigError(f"guess_number {key} must be an integer, got {opts[key]!r}",
                              field=f"environment.options.{key}", fix=f"e.g. {key} = {GUESS_DEFAULTS[key]}")
    if opts["low"] >= opts["high"]:
        raise ConfigError(f"guess_number low ({opts['low']}) must be below high ({opts['high']})",
                          field="environment.options.low", fix="e.g. low = 1, high = 100")
    if opts["max_guesses"] < 1:
        raise ConfigError("guess_number max_guesses must be at least 1", field="environment.options.max_guesses",
                          fix="e.g. max_guesses = 7")
    if not isinstance(opts["secret_column"], str) or not opts["secret_column"]:  # else never found: random secrets
        raise ConfigError(f"guess_number secret_column must be a column name, got {opts['secret_column']!r}",
                          field="environment.options.secret_column", fix='e.g. secret_column = "secret"')
    if not isinstance(opts["reward"], (int, float)) or isinstance(opts["reward"], bool):
        raise ConfigError(f"guess_number reward must be a number, got {opts['reward']!r}",
                          field="environment.options.reward", fix="e.g. reward = 1.0")
    return opts


class GuessNumber:
    """One game: the secret comes from the row's ``secret_column``, else from ``seed`` and the row
    (so every episode of a GRPO group plays the same game). The guess is the last integer in the
    assistant's text; a turn without one costs a guess and says what is expected."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = _guess_options(options)
        self.secret: int | None = None
        self.guesses = 0

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        low, high = self.options["low"], self.options["high"]
        column = self.options["secret_column"]
        if column in row and row[column] is not None:
            secret = row[column]
            if isinstance(secret, str) and _INTEGER.fullmatch(secret.strip()):
                secret = int(secret)
            if type(secret) is not int or not low <= secret <= high:
                raise ValueError(f"guess_number: row column {column!r} is {secret!r}, not an integer in [{low}, {high}]")
        else:
            key = json.dumps({k: row[k] for k in sorted(row)}, sort_keys=True, default=str)
            secret = random.Random(f"{self.options['seed']}:{key}").randint(low, high)
        self.secret, self.guesses = secret, 0
        prompt = row.get("prompt")
        if isinstance(prompt, list) and prompt:
            return [dict(m) for m in prompt]
        text = prompt if isinstance(prompt, str) and prompt else (
            f"I am thinking of an integer between {low} and {high}. Find it: answer each turn with one "
            f"number and I will say higher or lower. You have {self.options['max_guesses']} guesses.")
        return [{"role": "user", "content": text}]

    def step(self, assistant_message: Message) -> Observation:
        if self.secret is None:
            raise RuntimeError("guess_number: step before reset")
        self.guesses += 1
        left = self.options["max_guesses"] - self.guesses
        found = _INTEGER.findall(str(assistant_message.get("content") or ""))
        if not found:
            feedback = f"Answer with one integer between {self.options['low']} and {self.options['high']}."
        elif int(found[-1]) == self.secret:
            return Observation([{"role": "user", "content": f"Correct! It was {self.secret}."}],
                               reward=float(self.options["reward"]), done=True)
        else:
            feedback = "Higher." if int(found[-1]) < self.secret else "Lower."
        if left <= 0:
            return Observation([{"role": "user", "content": f"{feedback} No guesses left; it was {self.secret}."}],
                               reward=0.0, done=True)
        return Observation([{"role": "user", "content": f"{feedback} {left} guess{'es' if left > 1 else ''} left."}])


# --- registration ----------------------------------------------------------------------------------------

def _usable() -> str | None:
    return None


BUILTIN_TOOLS: tuple[tuple[Callable[..., Any], str, Callable[[], str | None]], ...] = (
    (calculator, "exact arithmetic: + - * / // % ** and parentheses (ast-based, no eval)", _usable),
    (python, "run Python in the code sandbox (fresh process, no network, time-limited); returns its output",
     _probe_python),
)


@hookimpl
def polyrl_register_tools(register: Callable[[ToolSpec], None]) -> None:
    for fn, summary, probe in BUILTIN_TOOLS:
        register(ToolSpec(name=fn.__name__, function=fn, summary=summary, distribution="polyrl", probe=probe))


@hookimpl
def polyrl_register_environments(register: Callable[[EnvironmentSpec], None]) -> None:
    register(EnvironmentSpec(name="guess_number", create=GuessNumber, distribution="polyrl",
                             summary="guess a secret integer with higher/lower feedback; reward 1 when found"))
