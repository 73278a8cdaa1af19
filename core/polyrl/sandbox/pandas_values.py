"""pandas DataFrames, Series and Indexes crossing between the tests and the sample as plain data.

Why: a right solution returning a DataFrame kept it in the sample (a handle), so ``df.equals(e)``,
``pd.testing.assert_frame_equal(f(x), e)``, ``(f(x) == e).all().all()`` and ``isinstance(f(x),
pd.DataFrame)`` all failed it, and a test's DataFrame argument could not be sent at all. Each side
now describes an exact pandas value (``type(v) is pd.DataFrame``, never a subclass) as plain data
(``pandas_plain``: column and index names, per-column values, dtype names from an allow-list) and
the other side rebuilds its own (``pandas_made``). Sound as ``standard_values``: what the trainer
compares is a DataFrame of the trainer's own pandas, built from checked data (nothing unpickled,
evaluated or called of the sample's); a value outside the allow-list (a MultiIndex, a nullable
``Int64`` column, an object column holding a ``Decimal``, a subclass) stays in the sample as a
handle the tests' pandas never takes for a DataFrame, and one of the tests' cannot be sent.

Shape (tuples and lists, ``values.encode``'s plain data): an index is ``("range", name, start,
stop, step)`` or ``("index", name, dtype, values, freq)``; a Series ``("series", name, dtype,
values, index)``; a DataFrame ``("frame", columns, [(dtype, values), ...], index)``; a category
column's values are ``(codes, categories, ordered)``; datetimes are their int64 ticks.

The part below the marker line is also the sample's (``runner.SERVER_SOURCE`` puts it between
``values.py`` and ``server.py``, where ``encode``, ``spread`` and ``ProtocolError`` are values.py's
own): it imports pandas only where a pandas value is met, so a sample without one pays nothing.
"""

from __future__ import annotations

from polyrl.sandbox.values import ProtocolError, spread


def holds_pandas(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is a pandas value (``is_pandas``) or a list, tuple, set or dict holding one,
    at any depth (a call's arguments: ``remote.Remote.__call__``)."""
    if is_pandas(value):
        return True
    if depth > 8:
        return False
    if type(value) is dict:
        return any(holds_pandas(part, depth + 1) for pair in value.items() for part in pair)
    if type(value) in (list, tuple, set, frozenset):
        return any(holds_pandas(part, depth + 1) for part in value)  # type: ignore[attr-defined]
    return False


# ---- shared with the sample's program from here (runner.SERVER_SOURCE) ----
import sys  # noqa: E402 - the sample's program starts here, after values.py

#: numpy dtypes whose items are Python's bool, int or float (``tolist()``), rebuilt by ``np.array``.
_PANDAS_NUMBERS = {"bool": bool, **{kind + str(bits): int for kind in ("int", "uint") for bits in (8, 16, 32, 64)},
                   "float32": float, "float64": float}
#: datetime64 columns, crossing as their int64 ticks (NaT is the smallest int64); naive only.
_PANDAS_TIMES = frozenset(f"datetime64[{unit}]" for unit in ("s", "ms", "us", "ns"))
#: pandas' string dtypes by name -> (its NA is NaN, storage): ``str`` (pandas 3's default) and ``string``.
_PANDAS_STRINGS = {f"{kind}[{storage}]": (kind == "str", storage)
                   for kind in ("str", "string") for storage in ("python", "pyarrow")}
#: Most frequency text a DatetimeIndex may carry (``"D"``, ``"2h"``, ``"W-SUN"``).
_PANDAS_MAX_FREQ = 40
#: Most distinct values of one column or index that may share one full 32-bit hash of pandas' own
#: hash tables (values.py's ``MAX_SAME_HASH`` for Python's). Its khash tables probe by the full hash
#: (start ``hash & mask``, step ``murmur2(hash) | 1``), so values of distinct hashes part whatever the
#: table's size, and only equal hashes walk one path: n values on one hash cost n * n / 2 probes
#: (20k took 2.7 s in ``value_counts``, 250k fit one message), where random values share by 2 or 3.
_PANDAS_MAX_SAME_HASH = 16
_PANDAS_M32 = 0x5BD1E995  # murmur2's multiplier, pandas' ``murmur2_32_32to32`` (khash.h)
_PANDAS_SEED = 0xC70F6907 ^ 4


def _pandas_classes():
    """pandas' own DataFrame, Series and index classes where pandas is imported here, else None."""
    pd = sys.modules.get("pandas")
    if pd is None:
        return None
    try:
        return pd.DataFrame, pd.Series, pd.Index, pd.RangeIndex, pd.DatetimeIndex
    except AttributeError:  # pandas half-imported (or not pandas at all)
        return None


def is_pandas(value):
    """Whether ``value`` is exactly one of pandas' DataFrame, Series or index classes."""
    classes = _pandas_classes()
    return classes is not None and type(value) in classes


def pandas_plain(value):
    """``value`` (exactly a pandas DataFrame, Series, Index, RangeIndex or DatetimeIndex) as plain
    data of the module doc's shape, or None where it is none of them or holds anything outside the
    allow-list or that ``pandas_made`` refuses (categories of datetimes, a ``DateOffset`` frequency,
    values piling up on one of pandas' hashes), which the other side would take for a malformed
    value (the sample's: crashed). Nothing here decides a test: the data is what the other side rebuilds."""
    classes = _pandas_classes()
    if classes is None or type(value) not in classes:
        return None
    try:
        plain = _pandas_described(value, classes)
        if plain is not None:
            pandas_made(plain)  # what the other side would refuse (a false crash there) stays a handle here
        return plain
    except Exception:  # noqa: BLE001 - a value pandas cannot describe, or rebuild, stays where it is
        return None


def _pandas_described(value, classes):
    """``pandas_plain``'s data, unchecked: None outside the allow-list."""
    frame, series = classes[0], classes[1]
    if type(value) is frame:
        columns = _pandas_index_plain(value.columns, classes)
        index = _pandas_index_plain(value.index, classes)
        items = [_pandas_array_plain(value.iloc[:, i], classes) for i in range(value.shape[1])]
        if columns is None or index is None or any(item is None for item in items):
            return None
        return ("frame", columns, items, index)
    if type(value) is series:
        index = _pandas_index_plain(value.index, classes)
        item = _pandas_array_plain(value, classes)
        if index is None or item is None:
            return None
        return ("series", _pandas_plain_name(value.name), item[0], item[1], index)
    return _pandas_index_plain(value, classes)


def _pandas_plain_name(name):
    """A Series' or an index's name as plain data: a numpy scalar (``df.iloc[0].name``) as its number."""
    if type(name).__module__ == "numpy" and getattr(name, "ndim", None) == 0:
        return name.item()
    return name


def _pandas_index_plain(index, classes):
    if type(index) is classes[3]:
        return ("range", _pandas_plain_name(index.name), index.start, index.stop, index.step)
    if type(index) not in (classes[2], classes[4]):
        return None
    item = _pandas_array_plain(index, classes)
    if item is None or item[0] == "category":
        return None
    freq = getattr(index, "freqstr", None) if type(index) is classes[4] else None
    return ("index", _pandas_plain_name(index.name), item[0], item[1], freq)


def _pandas_array_plain(values, classes):
    """(dtype name, values) of a Series' or an Index's items, or None outside the allow-list."""
    dtype = values.dtype
    name = getattr(dtype, "name", None)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(dtype, numpy.dtype):
        if name in _PANDAS_NUMBERS:
            return (name, values.to_numpy().tolist())
        if name in _PANDAS_TIMES:
            return (name, values.to_numpy().view("int64").tolist())
        if name == "object":
            return ("object", list(values.to_numpy()))
        return None
    if type(dtype).__name__ == "StringDtype":
        kind = "str" if name == "str" else "string"
        text = kind + "[" + str(dtype.storage) + "]"
        if text not in _PANDAS_STRINGS:
            return None
        items = list(values.to_numpy(dtype=object, na_value=None))
        if not all(item is None or type(item) is str for item in items):
            return None
        return (text, items)
    if type(dtype).__name__ == "CategoricalDtype":
        categories = _pandas_index_plain(dtype.categories, classes)
        if categories is None or type(dtype.ordered) is not bool:
            return None
        return ("category", (values.array.codes.tolist(), categories, dtype.ordered))
    return None


def pandas_made(plain):
    """The pandas value ``pandas_plain`` described, made by this process's own pandas from exact
    plain data; ``ProtocolError`` for anything malformed or outside the allow-list."""
    try:
        pd = __import__("pandas")
        np = __import__("numpy")
    except ImportError:
        raise ProtocolError("a pandas value, and pandas is not installed here") from None
    if type(plain) is not tuple or not plain or plain[0] not in ("frame", "series", "range", "index"):
        raise ProtocolError("not a pandas value")
    try:
        if plain[0] == "frame":
            if len(plain) != 4 or type(plain[2]) is not list:
                raise ProtocolError("a malformed DataFrame")
            columns, index = _pandas_index_made(pd, np, plain[1]), _pandas_index_made(pd, np, plain[3])
            if len(columns) != len(plain[2]):
                raise ProtocolError("a DataFrame with more or fewer columns than column names")
            made = []
            for item in plain[2]:
                if type(item) is not tuple or len(item) != 2:
                    raise ProtocolError("a malformed DataFrame column")
                made.append(_pandas_series(pd, np, None, item[0], item[1], index))
            frame = pd.DataFrame(dict(enumerate(made)), index=index) if made else pd.DataFrame(index=index)
            frame.columns = columns
            return frame
        if plain[0] == "series":
            if len(plain) != 5:
                raise ProtocolError("a malformed Series")
            return _pandas_series(pd, np, _pandas_name(plain[1]), plain[2], plain[3],
                                  _pandas_index_made(pd, np, plain[4]))
        return _pandas_index_made(pd, np, plain)
    except ProtocolError:
        raise
    except (ValueError, TypeError, OverflowError, IndexError, KeyError) as exc:
        raise ProtocolError(f"a malformed pandas value: {str(exc)[:200]}") from None


def _pandas_name(name):
    """A Series' or an index's name: plain data pandas can hash."""
    hash(name)
    return name


def _pandas_series(pd, np, name, dtype, values, index):
    array = _pandas_array_made(pd, np, dtype, values)
    if len(array) != len(index):
        raise ProtocolError("a pandas column of another length than its index")
    return pd.Series(array, index=index, name=name, dtype=array.dtype, copy=False)


def _pandas_index_made(pd, np, plain):
    if type(plain) is not tuple or not plain:
        raise ProtocolError("a malformed pandas index")
    if plain[0] == "range" and len(plain) == 5 and all(type(p) is int for p in plain[2:]):
        return pd.RangeIndex(plain[2], plain[3], plain[4], name=_pandas_name(plain[1]))
    if plain[0] != "index" or len(plain) != 5 or plain[2] == "category":
        raise ProtocolError("a malformed pandas index")
    name, dtype, values, freq = _pandas_name(plain[1]), plain[2], plain[3], plain[4]
    array = _pandas_array_made(pd, np, dtype, values)
    if dtype in _PANDAS_TIMES:
        if freq is not None and not (type(freq) is str and len(freq) <= _PANDAS_MAX_FREQ
                                     and freq.replace("-", "").isalnum()):
            raise ProtocolError("a malformed DatetimeIndex frequency")
        return pd.DatetimeIndex(array, freq=freq, name=name, dtype=array.dtype)
    if freq is not None:
        raise ProtocolError("a frequency on an index of no datetimes")
    if dtype == "object":
        spread(list(values))  # pandas hashes them into a table as Python does: no values built to collide
    return pd.Index(array, name=name, dtype=array.dtype, copy=False)


def _pandas_array_made(pd, np, dtype, values):
    """An array of ``dtype`` (a name of the allow-list) holding ``values``, checked item by item."""
    if type(dtype) is not str:
        raise ProtocolError("a pandas dtype that is no name")
    if dtype == "category":
        if type(values) is not tuple or len(values) != 3 or type(values[0]) is not list or type(values[2]) is not bool:
            raise ProtocolError("a malformed category column")
        codes = _pandas_array_made(pd, np, "int64", values[0])
        categories = _pandas_index_made(pd, np, values[1])
        if type(categories) is not pd.Index:
            raise ProtocolError("categories of a kind not rebuilt")
        return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories, ordered=values[2]))
    if type(values) is not list:
        raise ProtocolError("pandas values that are no list")
    kind = _PANDAS_NUMBERS.get(dtype)
    if kind is not None:
        if not all(type(v) is kind for v in values):
            raise ProtocolError(f"a {dtype} column holding other values")
        return _pandas_spread(np, np.array(values, dtype=dtype))
    if dtype in _PANDAS_TIMES:
        if not all(type(v) is int for v in values):
            raise ProtocolError("a datetime column holding other values")
        return _pandas_spread(np, np.array(values, dtype="int64").view(dtype))
    strings = _PANDAS_STRINGS.get(dtype)
    if strings is not None:
        if not all(v is None or type(v) is str for v in values):
            raise ProtocolError("a string column holding other values")
        na = np.nan if strings[0] else pd.NA
        return pd.array(values, dtype=pd.StringDtype(strings[1], na_value=na))
    if dtype == "object":
        array = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):  # one by one: a list item stays one item
            array[i] = v
        _pandas_objects_spread(values)
        return array
    raise ProtocolError(f"a pandas dtype outside the allow-list: {dtype[:40]}")


def _pandas_spread(np, array):
    """``array`` (numbers or datetimes of the sample's), unless more than ``_PANDAS_MAX_SAME_HASH``
    distinct values share a hash of a table pandas puts them in (``ProtocolError``), as ``spread``
    refuses Python's: int64's, uint64's and datetime64's (as int64) khash ``(k >> 33) ^ k ^ (k << 11)``
    (a linear map, so 2**32 keys of each hash are at hand), float64's murmur2 of its bits (ints too,
    cast to float64 against a float), and Python's hash folded to 32 bits of an int in an object
    table (``astype(object)``). Narrower ints and float32 hash one to one. Vectorised: a few numpy
    passes, nothing per value."""
    kind = array.dtype.kind
    if len(array) <= _PANDAS_MAX_SAME_HASH or kind not in "iuMf":
        return array
    if kind in "iuM":
        keys = _pandas_distinct(np, (array.view("int64") if kind == "M" else array).astype("uint64" if kind == "u" else "int64"))
        bits = keys.view("uint64")
        _pandas_piled(np, (bits >> np.uint64(33)) ^ bits ^ (bits << np.uint64(11)))
        if kind == "M":
            return array
        _pandas_piled(np, _pandas_python_hash(np, keys))
    floats = array.astype("float64")
    nan = floats != floats
    floats = _pandas_distinct(np, floats[~nan])  # -0.0 and 0.0 one value (equal); NaNs, one, left out
    _pandas_piled(np, _pandas_float_hash(np, floats))
    return array


def _pandas_piled(np, hashes):
    """``ProtocolError`` where more than ``_PANDAS_MAX_SAME_HASH`` of ``hashes`` (one per distinct
    value) are equal in their low 32 bits, the hash khash takes."""
    hashes = np.sort((hashes & np.uint64(0xFFFFFFFF)).astype("uint32") if hashes.dtype != np.uint32 else hashes)
    if len(hashes) <= _PANDAS_MAX_SAME_HASH:
        return
    starts = np.flatnonzero(np.concatenate(([True], hashes[1:] != hashes[:-1], [True])))
    if int(np.diff(starts).max()) > _PANDAS_MAX_SAME_HASH:
        raise ProtocolError("pandas values built to collide in its hash tables")


def _pandas_distinct(np, values):
    """The distinct ones of ``values`` (no NaN), sorted. Not ``np.unique``: numpy 2.3's hashes ints."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def _pandas_float_hash(np, floats):
    """pandas' ``kh_float64_hash_func`` of each float64: 0 for 0.0 and NaN, else ``murmur2_64to32``
    of its bits (khash_python.h)."""
    bits = floats.view("uint64")
    m = np.uint32(_PANDAS_M32)
    h = np.full(len(floats), _PANDAS_SEED, dtype="uint32")
    for k in ((bits & np.uint64(0xFFFFFFFF)).astype("uint32"), (bits >> np.uint64(32)).astype("uint32")):
        k = k * m
        k ^= k >> np.uint32(24)
        k *= m
        h *= m
        h ^= k
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    h[(floats == 0) | (floats != floats)] = 0
    return h


def _pandas_python_hash(np, keys):
    """Python's ``hash`` of each int64 or uint64 (``k mod 2**61 - 1``, signed; -1 is -2), folded to 32
    bits as pandas' object tables fold it (``(h >> 32) ^ h``, ``kh_python_hash_func``)."""
    modulus = np.uint64(2**61 - 1)
    if keys.dtype.kind == "u":
        h = keys % modulus
    else:
        negative = keys < 0
        magnitude = np.where(negative, (~keys.view("uint64")) + np.uint64(1), keys.view("uint64")) % modulus
        h = np.where(negative, (~magnitude) + np.uint64(1), magnitude)  # -m as two's complement
        h[h == np.uint64(2**64 - 1)] = np.uint64(2**64 - 2)
    return (h >> np.uint64(32)) ^ h


def _pandas_objects_spread(values):
    """``values`` of an object column or index, unless more than ``_PANDAS_MAX_SAME_HASH`` distinct
    ones share the 32-bit hash pandas' object tables give them (Python's, folded: ``(h >> 32) ^ h``):
    ints built so, each of its own Python hash (``spread`` lets them through), pile up there."""
    if len(values) <= _PANDAS_MAX_SAME_HASH:
        return
    classes: dict = {}
    for item in values:
        key = _pandas_object_hash(item)
        if key is None:
            continue
        same = classes.setdefault(key, [])
        if any(item is other or _pandas_same(item, other) for other in same):
            continue
        same.append(item)
        if len(same) > _PANDAS_MAX_SAME_HASH:
            raise ProtocolError("pandas values built to collide in its hash tables")


def _pandas_object_hash(item):
    """pandas' ``kh_python_hash_func`` of one plain value (khash_python.h), or None if unhashable."""
    mask = 2**64 - 1
    kind = type(item)
    if kind is float:
        h = 0 if item != item else hash(item)
    elif kind is complex:
        parts = [0 if p != p else hash(p) for p in (item.real, item.imag)]
        h = (parts[0] + 1000003 * parts[1]) & mask
        h = -2 if h == mask else h
    elif kind is tuple:
        acc = 2870177450012600261
        for part in item:
            lane = _pandas_object_hash(part)
            if lane is None:
                return None
            acc = ((acc + lane * 14029467366897019727) & mask)
            acc = ((acc << 31) | (acc >> 33)) & mask
            acc = (acc * 11400714785074694791) & mask
        acc = (acc + (len(item) ^ (2870177450012600261 ^ 3527539))) & mask
        h = 1546275796 if acc == mask else acc
    else:
        try:
            h = hash(item)
        except TypeError:
            return None
    h &= mask
    return ((h >> 32) ^ h) & 0xFFFFFFFF


def _pandas_same(a, b):
    """Whether pandas' object tables take ``a`` and ``b`` for one value (NaN is NaN, in tuples too)."""
    if type(a) is float and type(b) is float and a != a and b != b:
        return True
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(x is y or _pandas_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - a value that cannot be compared is another value
        return False
