# The sample's side of the sandbox. It runs alone inside the sandbox as
#     python -I -S -B -c <values.py + this file>
# (compiled once by the trainer and sent ahead of the job on stdin: ``polyrl.sandbox.server_code``;
# no polyrl there), reads the job from stdin, runs setup + solution, then answers the harness's
# requests (call a function, read an attribute, ...) until stdin closes. Its answers are only ever
# data the harness compares itself: nothing here decides whether a test passed. A sample can rewrite
# this file's functions at run time (it is ``__main__``) or answer the channel's descriptors itself,
# so every answer, class facts read from ``type`` here (``_subtype``) included, is the sample's word;
# soundness rests on no request carrying a value the tests expect
# (``tests/test_sandbox_server_takeover.py``).
#
# Channel: requests arrive on the original stdin (marshal, length-prefixed: the trainer writes them,
# and marshal costs no import), answers leave on the original stdout as one JSON line each (the
# trainer parses JSON, never marshal, from a sample; ``_dumps`` writes it without importing json,
# whose ``re`` import would double a trivial sample's start-up time); both are moved to private descriptors before the sample runs, fd 0 becomes /dev/null
# and fd 1 a copy of fd 2 (the captured output), so ``print`` cannot corrupt the channel by
# accident.
import _json
import _operator
import builtins as _BUILTINS
import marshal
import os
import resource
import sys

#: Standard types the harness rebuilds from plain data (``standard_values.REBUILT``, the other way round):
#: (module, name) -> (the harness's constructor's module and name, the plain data it takes). By
#: name, not class: a solution's subclass has its own module and stays a handle.
_STANDARD = {
    ("collections", "Counter"): ("collections", "Counter", dict),
    ("collections", "OrderedDict"): ("collections", "OrderedDict", lambda v: list(v.items())),
    ("collections", "deque"): ("collections", "deque", list),
    ("collections", "defaultdict"): ("builtins", "dict", dict),
    ("fractions", "Fraction"): ("fractions", "Fraction", str),
    ("decimal", "Decimal"): ("decimal", "Decimal", str),
    ("collections", "UserDict"): ("collections", "UserDict", dict),
    ("collections", "UserList"): ("collections", "UserList", list),
    ("collections", "UserString"): ("collections", "UserString", str),
    ("builtins", "bytearray"): ("builtins", "bytearray", bytes),
    # positional ints (``standard_values.POSITIONAL``); an aware datetime or time stays a handle
    ("builtins", "range"): ("builtins", "range", lambda v: (v.start, v.stop, v.step)),
    ("datetime", "date"): ("datetime", "date", lambda v: (v.year, v.month, v.day)),
    ("datetime", "datetime"): ("datetime", "datetime", lambda v: v if v.tzinfo is not None else (
        v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond)),
    ("datetime", "time"): ("datetime", "time", lambda v: v if v.tzinfo is not None else (
        v.hour, v.minute, v.second, v.microsecond)),
    ("datetime", "timedelta"): ("datetime", "timedelta", lambda v: (v.days, v.seconds, v.microseconds)),
}

#: Standard dict types a test may pass (rebuilt here from its data), whose contents go back as a dict after a call
#: (``in_place``; a defaultdict comes as a dict already).
_DICT_ARGS = (("collections", "Counter"), ("collections", "OrderedDict"))


def _standard_dict(value):
    return (getattr(type(value), "__module__", None), getattr(type(value), "__name__", None)) in _DICT_ARGS \
        and isinstance(value, dict)


#: Binary operators the harness may ask of two of the sample's values (``remote.ARITHMETIC``).
_ARITH = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b, "@": lambda a, b: a @ b,
    "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
}
#: Unary operators the harness may ask of one of the sample's values (``remote.Remote.__neg__``...).
_UNARY = {"-": lambda a: -a, "+": lambda a: +a, "~": lambda a: ~a, "abs": abs}
#: Conversions to a number the harness may ask of one (``remote.Remote.__float__``...): the number is
#: the sample's, made without seeing any value of the tests'.
_NUMBER = {"float": float, "int": int, "index": _operator.index}
#: The sample's conversions of one of its values to the plain types the tests compare it with (``plain``).
_PLAIN = (("int", int), ("float", float))
#: Orderings the harness asks about for a value of the sample's against its own number (``plain``).
_ORDER = {"<": _operator.lt, "<=": _operator.le, ">": _operator.gt, ">=": _operator.ge}
#: The binary operators' method names (``plain``: which of them the value's type defines).
_DUNDERS = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "**": "pow",
            "@": "matmul", "&": "and", "|": "or", "^": "xor"}


def _truth(result):
    """A comparison's answer as a real bool: a bool, or numpy's (``np.bool_``, a 0-d bool array),
    which numpy-based classes' ``__eq__`` give; anything else is no answer."""
    if type(result) is bool:
        return result
    np = sys.modules.get("numpy")
    if np is not None and (isinstance(result, np.bool_) or (
            isinstance(result, np.ndarray) and result.shape == () and result.dtype == np.bool_)):
        return bool(result)
    raise TypeError("a comparison of the sample's values gave a %s, not a bool" % type(result).__name__)


def _plain(obj, text=False):
    """What the harness may compare and combine with the tests' plain values, all from one request
    (``remote.Remote._plain_answer``): its own int(), float() and str(), each only where its own ==
    agrees with what it made (``approx``: its float where that is not so); the orderings it answers
    against its own number (the int, else the float, else ``approx``), as that number does against
    itself where the number is exact; the operators its type defines, forward and reflected.
    No value of the tests' is seen here: the harness compares and computes with these itself."""
    found = {}
    for name, kind in (_PLAIN + (("str", str),) if text else _PLAIN):  # a str only for a str of the tests'
        try:
            # a str subclass's own text, not its __str__ ('C.A' of a (str, Enum) member equal to 'a')
            value = str.__str__(obj) if kind is str and isinstance(obj, str) else kind(obj)
            if type(value) is kind:
                if _truth(obj == value):
                    found[name] = value
                elif kind is float:
                    found["approx"] = value  # Frac(1, 3): no float equals it, its own float is near
        except Exception:
            pass
    number = found.get("int")
    if "float" in found and (number is None or found["float"] != number):
        number = found["float"]
    exact = number is not None
    if not exact:
        number = found.get("approx")
    order = []
    if number is not None:
        for how, op in _ORDER.items():
            try:
                answer = _truth(op(obj, number))
                if not exact or answer is op(number, number):
                    order.append(how)
            except Exception:
                pass
    kind = type(obj)
    found["order"] = order
    found["ops"] = [how for how, name in _DUNDERS.items() if getattr(kind, "__%s__" % name, None) is not None]
    found["rops"] = [how for how, name in _DUNDERS.items() if getattr(kind, "__r%s__" % name, None) is not None]
    return found


#: Most signals a sample may have queued (RLIMIT_SIGPENDING); the kernel's own (a timer's SIGALRM, a
#: child's SIGCHLD) and plain ``kill`` of a standard signal are not counted.
SIGNALS_QUEUED = 64


def _limits(lim):
    for name, soft, hard in (("RLIMIT_CPU", lim["cpu_s"], lim["cpu_s"] + 1),
                             ("RLIMIT_AS", lim["memory_bytes"], lim["memory_bytes"]),
                             ("RLIMIT_FSIZE", lim["file_size_bytes"], lim["file_size_bytes"]),
                             ("RLIMIT_NOFILE", lim["max_open_files"], lim["max_open_files"]),
                             ("RLIMIT_NPROC", lim["max_processes"], lim["max_processes"]),
                             ("RLIMIT_CORE", 0, 0),
                             # POSIX message queues: their bytes are counted against this limit of the
                             # uid that made each user namespace up to the host's, the trainer's uid
                             # (a sample's queues made the trainer's own mq_open fail with EMFILE)
                             ("RLIMIT_MSGQUEUE", 0, 0),
                             # queued real-time signals, counted the same way: a sample queueing its
                             # trainer's limit (96 555 here) made every timer_create of that uid fail
                             ("RLIMIT_SIGPENDING", SIGNALS_QUEUED, SIGNALS_QUEUED),
                             # scheduling: inherited from the trainer, where a raised RLIMIT_RTPRIO
                             # (``ulimit -r``, LimitRTPRIO=) let a sample take SCHED_FIFO and a raised
                             # RLIMIT_NICE let it go below nice 0, starving the trainer on its cores;
                             # at 0 it can only lower its priority (absent on macOS: skipped)
                             ("RLIMIT_RTPRIO", 0, 0),
                             ("RLIMIT_NICE", 0, 0)):
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError, AttributeError):
            pass
    _normal_priority()


#: Scheduling policies a sample may keep: the time-sharing ones (a real-time one goes back to SCHED_OTHER).
_SHARED_POLICIES = ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE")


def _normal_priority():
    """Run the sample at no more than normal priority: time-shared (SCHED_OTHER where it inherited
    SCHED_FIFO or SCHED_RR) and at nice 0 or above. Why: a trainer started under ``chrt -f`` or
    ``nice -n -10`` passed that on to every sample (a busy loop at real-time priority keeps the
    trainer off its core). Lowering one's own priority needs no privilege; a refusal ends the sample
    (it must never run above the trainer unnoticed). Skipped where ``os`` has no such calls (macOS)
    or the kernel does not say (an emulated one answering ENOSYS)."""
    if not hasattr(os, "sched_getscheduler"):
        return
    shared = [getattr(os, name) for name in _SHARED_POLICIES if hasattr(os, name)]
    try:
        policy, nice = os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return
    if policy not in shared:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    if nice < 0:
        os.setpriority(os.PRIO_PROCESS, 0, 0)


def _own_keyring(number):
    """Join a new, empty session keyring (``keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)``; ``number``
    is keyctl's system call number). Why: the sample inherited the trainer's session keyring, and
    a process possesses the keys of its session keyring whatever its uid, so without the seccomp
    filter (which refuses keyctl) a sample read the trainer's tokens there. Only then: ctypes'
    import costs a trivial sample 10-25 ms."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, 1, None) < 0 and ctypes.get_errno() not in (1, 38):  # EPERM, ENOSYS: no keyctl at all
        raise OSError(ctypes.get_errno(), "the sample cannot leave the trainer's session keyring")


def _memfd_filter(hexed):
    """Load ``polyrl.sandbox.memfd_filter``'s program (hex): memfd_create, memfd_secret,
    socketpair and pidfd_send_signal then fail with EPERM (at the off level renames, links, chdir
    and mounts too). Sent only where the full seccomp filter is off: a sample held up to
    max_open_files x file_size_mb in memfds, memory RLIMIT_AS does not count. A kernel without
    seccomp filters (EINVAL) runs the sample as before, and this returns why (the trainer's probe of
    the same function, ``memfd_filter.refused``, puts it in the report); any other refusal ends it."""
    import ctypes

    program = bytes.fromhex(hexed)

    class Program(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs for the memfd filter")
    if libc.prctl(22, 2, ctypes.byref(Program(len(program) // 8, program)), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        if ctypes.get_errno() != 22:
            raise OSError(ctypes.get_errno(), "the memfd filter was refused")
        return "the kernel refused it: prctl(PR_SET_SECCOMP) answered EINVAL (no seccomp filters here, or none it accepts)"
    return None


def _site(folders):
    """What ``site`` would have given, minus ``.pth`` processing (the server starts with -S)."""
    sys.path.extend(f for f in folders if os.path.isdir(f) and f not in sys.path)
    try:
        import site
        site.setquit()  # exit() and quit() exist in a solution's namespace as usual
    except Exception:
        pass


def _private_channel():
    """(read fd, write fd) for the channel; every other inherited descriptor is closed and named."""
    inherited = sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2) \
        if os.path.isdir("/proc/self/fd") else []
    extra = []
    for fd in inherited:
        try:
            os.fstat(fd)
        except OSError:
            continue  # the listdir's own descriptor, already closed
        extra.append(fd)
        os.close(fd)
    rfd, wfd = os.dup(0), os.dup(1)
    _as_stdin(os.open(os.devnull, os.O_RDONLY))
    os.dup2(2, 1)
    return rfd, wfd, extra


def _dumps(value):
    """JSON for the shapes the server sends (str-keyed dicts, lists, str, int, bool, None)."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is str:
        return _json.encode_basestring_ascii(value)
    if kind is list or kind is tuple:
        return "[" + ",".join([_dumps(item) for item in value]) + "]"
    if kind is dict:
        return "{" + ",".join([_json.encode_basestring_ascii(str(k)) + ":" + _dumps(v) for k, v in value.items()]) + "}"
    raise TypeError("cannot send a %s" % kind.__name__)


class _Channel:
    def __init__(self, rfd, wfd):
        self.rfd, self.wfd = rfd, wfd
        self.read, self.write, self.loads, self.dumps = os.read, os.write, marshal.loads, _dumps

    def _exactly(self, n):
        data = b""
        while len(data) < n:
            chunk = self.read(self.rfd, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def recv(self):
        head = self._exactly(8)
        if head is None:
            return None
        body = self._exactly(int.from_bytes(head, "big"))
        return None if body is None else self.loads(body)

    def send(self, message):
        data = (self.dumps(message) + "\n").encode("ascii")
        while data:
            data = data[self.write(self.wfd, data):]


class _Session:
    """Objects the harness refers to by handle, and the answers to its requests."""

    def __init__(self, namespace):
        self.namespace = namespace
        self.refs = []
        self.first = {}  # id of an object in ``refs`` -> the first handle given it (``sample_identity``)
        self.failed = {}  # ref -> what its iterator raised after the items a ``take`` sent
        self.handed = {}  # index -> the proxy of the tests' function or object of that index

    def out(self, value):
        data = encode(value)
        if data is not None:
            return data
        if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
            data = encode(value.item())  # a numpy scalar (np.int64(6)) is sent as the number it is
            if data is not None:
                return data
        if type(value) is type(sys):
            return ["m", value.__name__ if type(value.__name__) is str else "?"]
        if type(value) is _TestsCallback or type(value) is _TestsObject:  # theirs again (``invert(t) is t``)
            return ["H", object.__getattribute__(value, "_index")]
        if isinstance(value, type) and issubclass(value, BaseException):  # the harness makes its own of it
            self.refs.append(value)
            return ["E", len(self.refs) - 1, _lineage(value)]
        fields = getattr(type(value), "_fields", None)
        if isinstance(value, tuple) and type(value).__bases__ == (tuple,) and type(fields) is tuple:
            data = encode((type(value).__name__, fields, tuple(value)))  # a namedtuple: rebuilt there
            if data is not None:
                return ["N", data]
        spec = _STANDARD.get((getattr(type(value), "__module__", None), getattr(type(value), "__name__", None)))
        if spec is not None:  # a Counter, deque, Fraction...: sent as its plain data, rebuilt there
            data = encode(spec[2](value))
            if data is not None:
                return ["x", spec[0], spec[1], data]
        plain = pandas_plain(value)  # exactly a DataFrame, Series or Index: its plain data, rebuilt there
        if plain is not None:
            data = encode(plain)
            if data is not None:
                return ["P", data]
        self.refs.append(value)
        index = len(self.refs) - 1
        first = self.first.setdefault(id(value), index)  # ``refs`` holds it, so its id is never another's
        kind = "callable" if callable(value) else "object"
        sent = ["r", index, kind, type(value).__name__ if isinstance(type(value).__name__, str) else "?"]
        return sent if first == index else sent + [first]  # one object reached again: ``is`` holds there

    def arg(self, data):
        tag = data[0] if isinstance(data, list) and data else None
        if tag == "r":
            return self.refs[data[1]]
        if tag == "x":  # a standard type, from its plain data
            module = __import__(data[1], fromlist=[data[2]])
            return getattr(module, data[2])(self.arg(data[3]))
        if tag == "X":  # a built-in type made from positional arguments (range, slice)
            module = __import__(data[1], fromlist=[data[2]])
            return getattr(module, data[2])(*[self.arg(d) for d in data[3]])
        if tag == "K" or tag == "O":  # the tests' function or object: asked back over the channel (``_TestsCallback``)
            proxy = self.handed.get(data[1])
            if proxy is None:
                proxy = self.handed[data[1]] = (_TestsCallback if tag == "K" else _TestsObject)(self, data[1])
            return proxy
        if tag == "P":  # the tests' DataFrame, Series or Index: this process's pandas makes its own (``pandas_values``)
            return pandas_made(decode(data[1]))
        if tag == "g":  # a standard function, class or constant, by name: this process's own
            return getattr(__import__(data[1], fromlist=[data[2]]), data[2])
        if tag in ("l", "t"):  # items may be any of these, at any depth
            items = [self.arg(d) for d in data[1]]
            return items if tag == "l" else tuple(items)
        return decode(data)

    def answer_call(self, req, args, kwargs, result):
        # its list, dict and set arguments as they are now (``in_place``): every one after a
        # call returning None, the ones it changed after any other (LeetCode 26 returns k)
        sent = list(req["args"]) + [req["kwargs"][k] for k in kwargs]
        got = list(args) + [kwargs[k] for k in kwargs]
        now = [encode(a) if type(a) in (list, dict, set) else encode(dict(a)) if _standard_dict(a) else None
               for a in got]
        if result is not None:
            now = [a if a is not None and a != d else None for a, d in zip(now, sent)]
        if any(a is not None for a in now):
            after_kw = {k: v for k, v in zip(kwargs, now[len(args):]) if v is not None}
            return ["I", now[:len(args)], after_kw] + ([] if result is None else [self.out(result)])
        return self.out(result)

    def take(self, ref, obj, n):
        failed = self.failed.pop(ref, None)
        if failed is not None:
            raise failed
        items = []
        while len(items) < n:
            try:
                item = next(obj)
            except StopIteration:
                break
            except BaseException as exc:
                if not items:
                    raise
                self.failed[ref] = exc  # after the items it gave, as Python would raise it
                break
            items.append(self.out(item))
        return ["L", items]

    def names(self):
        return {name: self.out(value) for name, value in list(self.namespace.items())
                if not (name.startswith("__") and name.endswith("__"))}

    #: (setup, solution, the sample's folder) where the tests are stdin/stdout cases, else None
    program_code = None

    def program(self, text, most):
        """Run the solution as a program, ``__main__``, in a fresh module, on ``text`` as its
        stdin (``sys.stdin``, ``input()``, ``sys.stdin.buffer``, ``open(0)``: descriptor 0 is a file
        holding it), waiting for the threads it started (``threading.Thread(target=main).start()``).
        Its answer is what it wrote to descriptor 1, a file here too, as hex (at most ``most``
        bytes; None past them: longer than a right answer): ``print``, ``sys.stdout.buffer``,
        ``os.write(1)`` and ``open(1, 'w')``, ``sys.__stdout__``, ``os.fdopen(1)`` alike (only the
        first three were caught by ``_Printed``: a right program scored 0). The channel has its own
        descriptor, so nothing written there reaches the trainer as an answer. ``sys.exit(0)``
        ends it as a success."""
        setup, solution, root = self.program_code
        module = type(sys)("__main__")
        namespace = module.__dict__
        namespace["__builtins__"] = __builtins__
        saved = (sys.modules.get("__main__"), sys.modules.get("solution"), sys.stdin, sys.stdout)
        sys.modules["__main__"] = sys.modules["solution"] = module
        fd = _hidden_file(os.path.join(root, ".stdin"))
        data = text.encode("utf-8", "surrogateescape")
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, 0)
        _as_stdin(fd)
        _flush(sys.stdout)
        out, shared = _hidden_file(os.path.join(root, ".stdout")), os.dup(1)
        os.dup2(out, 1)
        try:
            sys.stdin = open(0, encoding="utf-8", closefd=False)
            try:
                if setup is not None:
                    exec(setup, namespace)
                exec(solution, namespace)
            except SystemExit as exc:
                if exc.code is not None and exc.code != 0:
                    raise
            threading = sys.modules.get("threading")
            if threading is not None:
                for thread in threading.enumerate():
                    if thread is not threading.current_thread() and not thread.daemon:
                        thread.join()
        finally:
            namespace.clear()  # its files on descriptor 1 (``open(1, 'w')``) write what they hold as they go
            for stream in (sys.stdout, sys.__stdout__, saved[3]):
                _flush(stream)
            sys.modules["__main__"], sys.modules["solution"], sys.stdin, sys.stdout = saved
            _as_stdin(os.open(os.devnull, os.O_RDONLY))
            os.dup2(shared, 1)
            os.close(shared)
            printed = _Printed.current
            if printed is not None:  # all of it is read from the file below, not twice
                tee = printed.tees[0][1]
                tee.parts, tee.kept, tee.decoder = [], 0, None
        try:
            size = os.lseek(out, 0, 2)
            if size > most:
                return None
            os.lseek(out, 0, 0)
            chunks = []
            while size > 0:
                chunk = os.read(out, size)
                if not chunk:
                    break
                chunks.append(chunk)
                size -= len(chunk)
            return b"".join(chunks).hex()
        finally:
            os.close(out)

    def handle(self, req):
        op = req["op"]
        if op == "names":
            return self.names()
        if op == "program" and self.program_code is not None and type(req.get("text")) is str:
            return self.program(req["text"], req.get("most", 0))
        obj = self.refs[req["ref"]]
        if op == "call":
            args = [self.arg(a) for a in req["args"]]
            kwargs = {k: self.arg(v) for k, v in req["kwargs"].items()}
            result = obj(*args, **kwargs)
            if type(result) is _COROUTINE:  # an ``async def``'s: run to its end here (``_awaited``)
                return ["a", self.answer_call(req, args, kwargs, _awaited(result))]
            return self.answer_call(req, args, kwargs, result)
        if op == "getattr":
            return self.out(getattr(obj, req["name"]))
        if op == "getitem":
            return self.out(obj[self.arg(req["key"])])
        if op == "len":
            return self.out(len(obj))
        if op == "bool":
            return self.out(bool(obj))
        if op == "str":
            return self.out(str(obj))
        if op == "hash":  # a set or dict key of the tests' (``remote.Remote.__hash__``)
            return self.out(hash(obj))
        if op == "arith":  # two of its values, as Python combines them (``remote.Remote._arith``)
            other = self.refs[req["other"]]
            return self.out(_ARITH[req["how"]](obj, other))
        if op == "compare":  # two of its values, as Python compares them; a bool or nothing
            other, how = self.refs[req["other"]], req["how"]
            if isinstance(obj, type) and isinstance(other, type) and how in ("==", "!="):
                return self.out((obj is other) is (how == "=="))  # two classes: never a metaclass's __eq__
            result = (obj == other if how == "==" else obj != other if how == "!=" else obj < other if how == "<"
                      else obj <= other if how == "<=" else obj > other if how == ">" else obj >= other)
            return self.out(_truth(result))
        if op == "unary":  # one of its values, as Python applies -, +, ~, abs to it
            return self.out(_UNARY[req["how"]](obj))
        if op == "round":  # round(obj) or round(obj, ndigits): its own __round__'s answer
            return self.out(round(obj) if req["ndigits"] is None else round(obj, req["ndigits"]))
        if op == "number":  # float(obj), int(obj), operator.index(obj): checked to be exactly that type there
            return self.out(_NUMBER[req["how"]](obj))
        if op == "plain":  # its own plain values, orderings and operators, for the tests' plain values
            return self.out(_plain(obj, req.get("text") is True))
        if op == "data":  # a dict/list/... subclass's items as its base type (``remote.Remote._container_data``)
            for base in (dict, list, tuple, set, frozenset):
                if isinstance(obj, base):
                    return self.out(base(obj))
            if isinstance(obj, str):  # a str subclass's text, whatever its __str__ says
                return self.out(str.__str__(obj))
            return self.out(_like_data(obj))
        if op == "type":  # the tests' type(value): which of the names they hold is its real class, or that class
            kind = type(obj)
            for index, ref in enumerate(req["names"]):
                if self.refs[ref] is kind:
                    return self.out(index)
            return self.out(kind)
        if op == "repr":
            return self.out(repr(obj))
        if op == "dir":  # a class's names, for a tests' class deriving from it (``subclassed``)
            return self.out([name for name in dir(obj) if type(name) is str])
        if op == "isinstance":  # the tests' isinstance(value, cls) of two of its values
            return self.out(_subtype(type(obj), self.refs[req["cls"]]))
        if op == "issubclass":
            if not isinstance(obj, type):
                raise TypeError("issubclass() arg 1 must be a class")
            return self.out(_subtype(obj, self.refs[req["cls"]]))
        if op == "next":
            return self.out(next(obj))
        if op == "take":  # up to n items of an iterator; what ends them early waits for the next take
            return self.take(req["ref"], obj, req["n"])
        if op == "iter":
            if req.get("lazy"):  # the tests read its items as they go (``take``)
                it = iter(obj)
                return self.out(True) if it is obj else self.out(it)
            it = iter(obj)
            items = []
            for item in it:
                items.append(self.out(item))
                if len(items) > MAX_ITEMS:
                    raise OverflowError("more than %d items" % MAX_ITEMS)
            if req.get("own"):  # and whether it is its own iterator (its items are gone now)
                return ["L", [self.out(it is obj), ["L", items]]]
            return ["L", items]
        raise ValueError("unknown request %r" % (op,))


async def _coroutine_kind():
    pass


_made = _coroutine_kind()  # its type, without importing ``types``
_COROUTINE = type(_made)
_made.close()
del _made


def _awaited(coroutine):
    """What a coroutine a call returned gives when run to its end, as the tests' ``asyncio.run(f(x))``
    or ``await f(x)`` would run it (``["a", answer]``: the harness hands the tests a coroutine
    giving that answer). Why: the coroutine stayed a handle here, so ``asyncio.run`` refused it and
    a right ``async def`` solution scored 0. It runs at the call, in an event loop of its own, whose
    self-pipe is an ``os.pipe`` (``_PipeSelfPipe``): the audit hook refuses every socket."""
    import asyncio
    return asyncio.run(coroutine)


class _PipeEnd:
    """One end of the ``os.pipe`` an asyncio event loop's self-pipe is made of here: the few socket
    methods asyncio calls on it (``setblocking``, ``fileno``, ``recv``, ``send``, ``close``)."""

    def __init__(self, fd):
        self._fd = fd

    def fileno(self):
        return self._fd

    def setblocking(self, flag):
        os.set_blocking(self._fd, flag)

    def recv(self, size, _read=os.read):
        return _read(self._fd, size)

    def send(self, data, _write=os.write):  # the real one: the sample's is ``_os_write``
        return _write(self._fd, data)

    def close(self):
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _make_self_pipe(loop):
    """``BaseSelectorEventLoop._make_self_pipe`` made of an ``os.pipe``: asyncio's own makes a unix
    ``socket.socketpair()``, which the audit hook refuses as every socket, so a right solution
    calling ``asyncio.run`` itself scored 0. A pipe is what a sample may make anyway (``os.pipe``):
    this opens nothing the sample could not, and no socket (``socketpair`` is refused by the
    kernel filters too: ``seccomp``, ``memfd_filter``)."""
    read, write = os.pipe()
    loop._ssock, loop._csock = _PipeEnd(read), _PipeEnd(write)
    loop._ssock.setblocking(False)
    loop._csock.setblocking(False)
    loop._internal_fds += 1
    loop._add_reader(read, loop._read_from_self)


class _PipeSelfPipe:
    """A ``sys.meta_path`` finder giving ``asyncio.selector_events``, once loaded, the pipe self-pipe
    above (``_make_self_pipe``). Installed before the sample runs, importing nothing: ``asyncio``'s
    import costs 40-70 ms, which a sample not using it should not pay. Nothing rests on it for
    soundness: a sample removing it, or loading the module around it, gets asyncio's own
    socketpair, which the audit hook and the kernel filters refuse."""

    NAME = "asyncio.selector_events"

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != cls.NAME:
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader:
    """A loader running ``asyncio.selector_events`` as its own loader would, then giving its
    ``BaseSelectorEventLoop`` the pipe self-pipe (``_PipeSelfPipe``)."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        loop_class = getattr(module, "BaseSelectorEventLoop", None)
        if isinstance(loop_class, type) and hasattr(loop_class, "_make_self_pipe"):
            loop_class._make_self_pipe = _make_self_pipe

    def __getattr__(self, name):  # ``get_source``, ``get_filename``...: its own loader's
        return getattr(self.loader, name)


def _no_process_start():
    """``_posixsubprocess`` loaded before the audit hook, its ``fork_exec`` refusing: ``asyncio``
    and ``subprocess`` import it, and the hook refused that import, so a right solution importing
    asyncio scored 0. A fresh load of the real one is still refused (``_install_audit_hook``), and
    ``subprocess.Popen`` and ``os.fork`` are refused events of their own."""
    try:
        import _posixsubprocess
    except ImportError:
        return

    def fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: starting processes is not allowed")
    _posixsubprocess.fork_exec = fork_exec


def _subtype(kind, cls):
    """Whether ``cls`` is in ``kind``'s MRO, read from ``type`` itself: a metaclass's
    ``__instancecheck__``, ``__subclasscheck__`` or ``__mro__`` property and an instance's
    ``__class__`` never answer (``remote.Remote.__instancecheck__``)."""
    if not isinstance(cls, type):
        raise TypeError("isinstance() arg 2 must be a type, a tuple of types, or a union")
    return any(c is cls for c in _MRO(kind))


_MRO = type.__dict__["__mro__"].__get__


def _hidden_file(path):
    """A new empty file at ``path``, unlinked at once: only the descriptor reaches it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.unlink(path)
    return fd


def _flush(stream):
    try:
        stream.flush()
    except BaseException:
        pass


def _as_stdin(fd):
    """Make ``fd`` descriptor 0. It may be 0 already: a program's ``open(0)`` closes it when freed."""
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)


#: Most characters of one request's printing sent with its answer (``_Printed``); its stream gets it all.
MAX_PRINTED = 1 << 20


class _Printed:
    """What the sample prints to ``sys.stdout``/``sys.stderr`` while one request runs, sent with its
    answer (``out``/``err``), so the harness can write it where the tests' streams point then
    (``redirect_stdout``, ``capsys``). Each stream still gets every character, so the output limit
    counts it as before. Bytes count too, decoded as UTF-8: written to ``sys.stdout.buffer`` (fast
    output in contest code) or to descriptor 1 or 2 (``os.write``, ``_os_write``), which never
    reached the tests' capture (a right solution scored 0). A stream the sample replaced itself is
    left as it set it."""

    #: the request's printing now, for ``_os_write``
    current = None

    def __init__(self, stdin=None):
        self.tees = [(name, _Tee(getattr(sys, name))) for name in ("stdout", "stderr")]
        for name, tee in self.tees:
            setattr(sys, name, tee)
        _Printed.current = self
        self.stdin = None
        if type(stdin) is str:  # the rest of the tests' ``sys.stdin = io.StringIO(...)``, for ``input()``
            import io
            self.stdin, self.old_stdin = io.StringIO(stdin), sys.stdin
            sys.stdin = self.stdin

    def end(self, answer):
        _Printed.current = None
        for name, tee in self.tees:
            if getattr(sys, name) is tee:
                setattr(sys, name, tee.stream)
            tee.keep_bytes(b"", True)
            if tee.parts:
                answer["out" if name == "stdout" else "err"] = "".join(tee.parts)
        if self.stdin is not None:  # how much of it the call read: the tests' stream moves on as far
            answer["in"] = self.stdin.tell()
            if sys.stdin is self.stdin:
                sys.stdin = self.old_stdin


#: Most characters of a prompt sent to the tests' ``input`` (``_TestsInput``).
MAX_PROMPT = 4096


class _TestsInput:
    """The tests' own ``input`` while one call runs, where they patched it (``mock.patch('builtins.input',
    ...)``, ``monkeypatch.setattr('builtins.input', ...)``): each ``input(prompt)`` of the sample's sends
    the prompt to the harness (``{"input": [prompt]}``, ``[]`` without one), which calls theirs and
    answers ``{"v": value}`` or ``{"e": [exception name, text]}``. Why: the sample's own ``input``
    read its empty stdin, so a right solution scored 0. Only plain data comes back, as from any call."""

    def __init__(self, chan):
        import builtins
        self.chan, self.builtins, self.old = chan, builtins, builtins.input
        builtins.input = self.input

    def input(self, *prompt):
        if len(prompt) > 1:
            raise TypeError("input expected at most 1 argument, got %d" % len(prompt))
        self.chan.send({"input": [str(p)[:MAX_PROMPT] for p in prompt]})
        reply = self.chan.recv()
        if type(reply) is not dict:
            raise EOFError("EOF when reading a line")
        if "e" in reply:
            name, text = reply["e"]
            kind = getattr(self.builtins, name, None) if type(name) is str else None
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                kind = RuntimeError
            raise kind(text)
        return decode(reply["v"])

    def end(self):
        if self.builtins.input == self.input:
            self.builtins.input = self.old


class _TestsCallback:
    """A function of the tests' handed to the solution (``apply(lambda x: x * 2, xs)``): calling it
    sends ``{"callback": [index, args, kwargs]}`` (its own values as handles) and serves the
    harness's requests (the tests' function reading those values) until the reply, ``{"v": value}``
    or ``{"e": [class name]}``. It has nothing else: the function stays in the tests' process."""

    __slots__ = ("_session", "_index")

    def __init__(self, session, index):
        self._session, self._index = session, index

    def __call__(self, *args, **kwargs):
        session = self._session
        return _ask_tests(session, {"callback": [self._index, [session.out(a) for a in args],
                                                 {str(k): session.out(v) for k, v in kwargs.items()}]})

    def __repr__(self):
        return "<function of the tests>"


class _TestsObject:
    """An object of a class the tests define, handed to the solution (a ``TreeNode`` of theirs):
    reading an attribute asks for it (``{"attr": [index, name]}``), setting one sends it
    (``{"setattr": [index, name, value]}``); the harness refuses ``__`` names and its class's own.
    ``len``, ``bool``, a loop, ``obj[k]``, ``in``, ``hash`` and comparisons are done there too
    (``{"use": [index, how, args]}``, ``tests_callbacks.USES``)."""

    __slots__ = ("_session", "_index")

    def __init__(self, session, index):
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_index", index)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _ask_tests(object.__getattribute__(self, "_session"),
                          {"attr": [object.__getattribute__(self, "_index"), name]})

    def __setattr__(self, name, value):
        session = object.__getattribute__(self, "_session")
        _ask_tests(session, {"setattr": [object.__getattribute__(self, "_index"), name, session.out(value)]})

    def __repr__(self):
        return "<object of the tests>"

    def _use(self, how, *args):
        session = object.__getattribute__(self, "_session")
        return _ask_tests(session, {"use": [object.__getattribute__(self, "_index"), how,
                                            [session.out(a) for a in args]]})

    def __len__(self):
        return self._use("len")

    def __bool__(self):
        return self._use("bool")

    def __iter__(self):  # its items, read there at once (at most ``MAX_ITEMS``)
        return iter(self._use("iter"))

    def __getitem__(self, key):
        return self._use("getitem", key)

    def __contains__(self, item):
        return self._use("contains", item)

    def __hash__(self):
        return self._use("hash")

    def __eq__(self, other):
        return self._use("==", other)

    def __ne__(self, other):
        return self._use("!=", other)

    def __lt__(self, other):
        return self._use("<", other)

    def __le__(self, other):
        return self._use("<=", other)

    def __gt__(self, other):
        return self._use(">", other)

    def __ge__(self, other):
        return self._use(">=", other)


def _ask_tests(session, message):
    """Send ``message`` to the harness and serve its requests until its reply (``_TestsCallback``)."""
    chan = session.chan
    chan.send(message)
    while True:
        message = chan.recv()
        if type(message) is not dict:
            raise EOFError("the tests ended while their function was called")
        if "op" not in message:
            break
        try:  # the tests' function asking about a value of the sample's (``p.x``, ``len(r)``)
            answer = {"ok": True, "v": session.handle(message)}
        except BaseException as exc:
            answer = {"ok": False, "exc": _describe(exc)}
        chan.send(answer)
    if "e" in message:
        name = message["e"][0] if type(message["e"]) is list and message["e"] else None
        kind = getattr(_BUILTINS, name, None) if type(name) is str else None
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            kind = RuntimeError
        raise kind()
    return session.arg(message.get("v"))


class _Tee:
    """A text stream writing to ``stream`` and keeping what it was given (up to ``MAX_PRINTED``)."""

    def __init__(self, stream):
        self.stream, self.parts, self.kept, self.decoder = stream, [], 0, None

    def write(self, text):
        if type(text) is str:
            self.keep(text)
        return self.stream.write(text)

    def keep(self, text):
        if self.kept < MAX_PRINTED and text:
            self.parts.append(text[:MAX_PRINTED - self.kept])
            self.kept += len(self.parts[-1])

    def keep_bytes(self, data, final=False):
        """Bytes written below the text stream, kept as the text they decode to (a character split
        across two writes is whole in the second; an invalid byte is U+FFFD)."""
        if self.decoder is None:
            if final:
                return
            import codecs
            self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.keep(self.decoder.decode(data, final))

    @property
    def buffer(self):
        return _BytesTee(self, self.stream.buffer)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):  # flush, encoding, buffer, fileno...: the stream's own
        return getattr(self.stream, name)


class _BytesTee:
    """``sys.stdout.buffer`` while a request runs: the stream's own, its bytes also kept by its ``_Tee``."""

    def __init__(self, tee, raw):
        self.tee, self.raw = tee, raw

    def write(self, data):
        written = self.raw.write(data)
        if isinstance(data, (bytes, bytearray, memoryview)):
            self.tee.keep_bytes(bytes(data))
        return written

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):  # flush, fileno, raw...: the buffer's own
        return getattr(self.raw, name)


def _os_write(fd, data, _write=os.write):
    """``os.write`` in the sample: what it writes to descriptor 1 or 2 while a request runs is also
    kept as printed there (``_Printed``); the channel keeps the real ``os.write`` (``_Channel``)."""
    written = _write(fd, data)
    printed = _Printed.current
    if printed is not None and fd in (1, 2) and isinstance(data, (bytes, bytearray, memoryview)):
        printed.tees[fd - 1][1].keep_bytes(bytes(data)[:written])
    return written


def _like_data(obj):
    """A container of no built-in base as the built-in data it stands for (``data``): a mapping
    (``UserDict``, a ``collections.abc.Mapping``) as a dict, a ``UserList`` or other sequence as a
    list, a set as a set, a ``UserString`` as its str; else None. Imported here, when asked: most
    samples never are."""
    import collections
    import collections.abc as abc
    if isinstance(obj, abc.Mapping):
        return dict(obj)
    if isinstance(obj, collections.UserString):
        return str(obj.data)
    if isinstance(obj, (str, bytes, bytearray)):
        return None
    if isinstance(obj, abc.Sequence):
        return list(obj)
    if isinstance(obj, abc.Set):
        return set(obj)
    return None


def _lineage(kind):
    """[module, name] of each class in an exception class's MRO, from which the harness makes a
    stand-in of its own (``harness.Session.exception_class``)."""
    return [[c.__module__ if type(c.__module__) is str else "?", c.__name__ if type(c.__name__) is str else "?"]
            for c in kind.__mro__[:32]]


def _names_read(code):
    """Every global name ``code`` and the code nested in it may load, builtins left out: which of
    the tests' preamble statements the solution reads (``tests_header.header`` runs it in tests)."""
    names, todo = set(), [code]
    while todo:
        each = todo.pop()
        names.update(each.co_names)
        todo += [const for const in each.co_consts if type(const) is type(code)]
    return {name for name in names if not hasattr(_BUILTINS, name)}


def _describe(exc):
    try:
        return [type(exc).__name__, str(exc)[:300], _lineage(type(exc)), _plain_state(exc)]
    except BaseException:
        return ["Exception", "error"]


def _plain_state(exc):
    """The exception's ``args`` (null unless plain data) and up to 32 instance attributes that are
    plain data, encoded: the harness gives its own copy of the exception these values
    (``remote_exceptions.remote_exception``); nothing else of the object crosses. Empty when reading them
    fails (an ``args`` property that raises): the class and message still cross."""
    try:
        return _read_state(exc)
    except BaseException:
        return {"args": None, "attrs": []}


def _read_state(exc):
    args = exc.args
    attrs = []
    state = getattr(exc, "__dict__", None)
    if type(state) is dict:
        for name, value in list(state.items()):
            data = encode(value) if type(name) is str and not name.startswith("__") else None
            if data is not None:
                attrs.append([name, data])
                if len(attrs) == 32:
                    break
    return {"args": encode(args) if type(args) is tuple else None, "attrs": attrs}


def _main():
    rfd, wfd, extra = _private_channel()
    chan = _Channel(rfd, wfd)
    job = chan.recv()
    _site(job.get("site") or [])
    if job.get("keyring"):
        _own_keyring(job["keyring"])
    if job.get("memfd"):
        _memfd_filter(job["memfd"])
    _limits(job["limits"])
    root = os.path.realpath(os.getcwd())
    # dont_inherit: this program's ``from __future__ import annotations`` (values.py's) made every
    # annotation of the solution a string, and ``@dataclass`` then failed ("'NoneType' object has
    # no attribute '__dict__'": it looks the class's module up in sys.modules)
    try:
        setup = compile(job["setup"], "<setup>", "exec", dont_inherit=True) if job["setup"] else None
        solution = compile(job["code"], "<solution>", "exec", dont_inherit=True)
        read = _names_read(solution)
        header = compile("".join(text for name, text in job.get("header") or () if name in read),
                         "<tests' preamble>", "exec", dont_inherit=True)
    except BaseException as exc:
        chan.send({"ok": False, "exc": _describe(exc), "fds": extra})
        return
    if job["audit"]:
        _no_process_start()
        sys.meta_path.insert(0, _PipeSelfPipe)
        _install_audit_hook(root, bool(job.get("native")), bool(job.get("strict")))
    os.write = _os_write  # after the channel took the real one
    module = type(sys)("solution")  # in sys.modules as ``__main__`` is for a script: what dataclasses, pickle look up
    namespace = module.__dict__
    namespace["__builtins__"] = __builtins__
    sys.modules["solution"] = module
    try:
        if job.get("program"):  # stdin/stdout cases: it runs once per case, on that input (``_Session.program``)
            _Session.program_code = (setup, solution, root)
        else:
            exec(header, namespace)  # the tests' preamble the solution reads (``tests_header``)
            if setup is not None:
                exec(setup, namespace)
            exec(solution, namespace)
    except BaseException as exc:
        chan.send({"ok": False, "exc": _describe(exc), "fds": extra})
        return
    session = _Session(namespace)
    session.chan = chan
    chan.send({"ok": True, "v": session.names(), "fds": extra})
    while True:
        req = chan.recv()
        if req is None:  # the harness is done: hand over the sample's output, then end
            for stream in (sys.stdout, sys.stderr):
                _flush(stream)
            os._exit(0)
        printed = _Printed(req.get("stdin"))
        asked = _TestsInput(chan) if req.get("input") is True else None
        try:
            answer = {"ok": True, "v": session.handle(req)}
        except BaseException as exc:
            answer = {"ok": False, "exc": _describe(exc)}
        if asked is not None:
            asked.end()
        printed.end(answer)
        chan.send(answer)


def _install_audit_hook(root, native, strict=False):
    """The inner, Python-level layer: refuses process creation, sockets, signals to others and
    writes outside the sample's folder. The kernel layers outside hold without it. ``native``
    (only behind bubblewrap, whose walls do not depend on this hook) lets ctypes load, which
    numpy needs; without bubblewrap ctypes would be a way around the hook.

    ``strict`` (the ``off`` level, where this hook is the wall and the small filter lets ``rename``
    and ``chdir`` through: ``memfd_filter``): a path written to, renamed, removed or changed to
    (``os.chdir``) must have no ``..`` component, and ``os.chdir`` of a descriptor is refused. Why:
    with no links (``symlink``/``link`` are refused by the filter) and no ``..``, a path inside the
    sample's folder can only walk down from it, so a second thread renaming its folders or changing
    the working folder between this judgement and the kernel's walk can change which file it
    names, never take it outside. With ``..`` it could: ``a/b/../../f`` judged inside, then ``a/b``
    moved up a level, and the kernel's second ``..`` left the folder. And ``fcntl.flock`` only of a
    file in the sample's folder: opening for reading passes the hook, so a ``user = "none"`` sample
    (root's files) took the flock of the uid pool's lock files (``polyrl.sandbox.uids``), and the
    trainer skipped those uids while it ran."""
    realpath, normpath, join, getcwd, fsdecode, getpid, readlink = (
        os.path.realpath, os.path.normpath, os.path.join, os.getcwd, os.fsdecode, os.getpid, os.readlink)
    prefix = root + os.sep
    # the names the sample's folder goes by as written (HOME, TMPDIR: tempfile's paths), where a
    # link above it makes them differ from ``root``; a path must be inside one as written too
    names = {root} | {normpath(os.environ[k]) for k in ("HOME", "TMPDIR", "TMP", "TEMP")
                      if os.environ.get(k, "").startswith(os.sep) and realpath(os.environ[k]) == root}
    prefixes = tuple(name.rstrip(os.sep) + os.sep for name in names)
    # a descriptor's metadata: judged by its path when opened, and reading anything passes, so
    # ``os.fchmod`` of a file outside opened for reading made it world-writable (os.truncate
    # needs a descriptor open for writing, which was judged)
    fd_refused = frozenset({"os.chmod", "os.chown", "os.utime", "os.setxattr", "os.removexattr", "os.chflags",
                            "os.lchflags"})
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    allowed_writes = frozenset({"/dev/null"})
    denied = frozenset({
        "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
        "subprocess.Popen", "pty.spawn", "os.startfile", "os.killpg",
        "resource.setrlimit", "resource.prlimit", "sys.remote_exec", "os.setns", "os.unshare",
        "webbrowser.open", "urllib.Request", "http.client.connect", "ftplib.connect",
        "smtplib.connect", "imaplib.open", "nntplib.connect", "poplib.connect", "telnetlib.Telnet.open",
    })
    denied_prefixes = ("socket.",) if native else ("socket.", "ctypes.", "_ctypes.", "sqlite3.", "syslog.")
    blocked_modules = {"_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters"}
    if not native:
        blocked_modules |= {"ctypes", "_ctypes", "cffi", "_cffi_backend"}
        # C modules writing files by path with no audit event the hook could judge (without
        # bubblewrap the host's files are there): sqlite3 (a database anywhere, by ``connect``,
        # ``ATTACH`` or ``VACUUM INTO``, and ``load_extension`` runs native code), readline
        # (``write_history_file``: lines of the sample's choosing in any file), and the POSIX
        # shared memory and named semaphores in the host's /dev/shm (``_posixshmem.shm_open``,
        # ``_multiprocessing.SemLock``: memory no rlimit counts that outlives the sample, and as
        # ``user = "none"`` the trainer's own segments); ``syslog.`` events: the host's journal
        blocked_modules |= {"_sqlite3", "readline", "_posixshmem", "_multiprocessing"}
    path_events = {
        "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.rename": ((0, 1), (2, 3)),
        "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)), "os.mkdir": ((0,), (2,)),
        "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.chflags": ((0,), ()),
        "os.lchflags": ((0,), ()), "os.truncate": ((0,), ()), "os.utime": ((0,), (3,)),
        "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()), "shutil.rmtree": ((0,), (1,)),
        "os.mkfifo": ((0,), (2,)), "os.mknod": ((0,), (3,)),
    }
    if strict:  # the working folder moves within the sample's folder only (docstring)
        path_events["os.chdir"] = ((0,), ())
        fd_refused |= {"os.chdir"}

    def inside(path):
        """Inside the sample's folder both as written and with its links resolved: a path through a
        link whose target changes (``/proc/self/fd/N`` after a thread's ``dup2``) was judged by the
        target it had, then opened at the one it got."""
        if isinstance(path, int):
            return True  # a file descriptor: checked when it was opened
        try:
            if strict and ".." in fsdecode(path).split(os.sep):
                return False
            full = join(getcwd(), fsdecode(path))
            real = realpath(full)
        except Exception:
            return False
        written = normpath(full)
        return (real == root or real.startswith(prefix)) and (written in names or written.startswith(prefixes))

    def deny(event, detail=""):
        raise PermissionError("sandbox: %s is not allowed%s" % (event, detail))

    def hook(event, args):
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(flags, int) and flags & write_flags) or (
                isinstance(mode, str) and any(c in mode for c in "wax+"))
            if writing and path is not None and not inside(path):
                if not (isinstance(path, str) and path in allowed_writes):
                    deny("writing outside the sandbox folder", ": %r" % (path,))
            return
        spec = path_events.get(event)
        if spec is not None:
            paths, fds = spec
            if event in fd_refused and args and isinstance(args[0], int):
                deny(event + " of a file descriptor")
            for i in fds:
                if i < len(args) and args[i] is not None and args[i] != -1:
                    deny(event + " with dir_fd")
            for i in paths:
                if i < len(args) and not inside(args[i]):
                    deny(event + " outside the sandbox folder", ": %r" % (args[i],))
            return
        if event == "import":
            name = str(args[0]) if args else ""
            if name.split(".")[0] in blocked_modules or name.rsplit(".", 1)[-1] in blocked_modules:
                deny("importing " + name)
            return
        if event == "fcntl.flock" and strict:  # a lock only on a file of the sample's folder (docstring)
            try:
                target = readlink("/proc/self/fd/%d" % args[0])
            except Exception:
                deny("fcntl.flock of that descriptor")
            if target.endswith(" (deleted)"):
                target = target[:-len(" (deleted)")]
            if target.startswith(os.sep) and not inside(target):
                deny("fcntl.flock of a file outside the sandbox folder", ": %r" % (target,))
            return
        if event == "os.kill":
            if args and args[0] != getpid():
                deny("signalling other processes")
            return
        if event in denied or event.startswith(denied_prefixes):
            deny(event)

    sys.addaudithook(hook)


_main()
