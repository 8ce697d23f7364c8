"""Where a compiled function's tensors live, and the Python state that guards its graphs.

A replayed graph reads its captured tensors and writes its results back through *references*:
an argument by position (:class:`ArgRef`), an entry of a dict or list (:class:`ItemRef`), an
attribute of an object (:class:`AttrRef`), or one tensor object (:class:`ObjRef`).

:func:`walk` visits the objects a function can reach — its arguments, bound ``self``, closure
cells and the globals its code names, then their attributes, lists and dicts (bounded) — and
returns every tensor slot it finds and a *digest*: tensor shapes, dtypes, devices and gradient
presence, container sizes and plain Python values (a learning rate, ``module.training``). A graph
is replayed only while the digest matches the one it was traced with.
"""
from __future__ import annotations

import types

from anydevice.engine.tensor import Tensor, _wrap

_PLAIN = (int, float, bool, str, type(None), complex)
_SKIP = (types.ModuleType, type, types.BuiltinFunctionType, types.MethodWrapperType, bytes, bytearray)
MAX_OBJECTS = 4000   # objects visited per walk
MAX_ITEMS = 512      # entries read of one list or dict


class ArgRef:
    """The ``index``-th tensor among the call's (flattened) arguments."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def get(self, args):
        return args[self.index]

    def set(self, args, t):  # arguments are the caller's objects: never replaced, only rebound
        raise TypeError("an argument cannot be replaced")

    def __str__(self) -> str:
        return f"arg{self.index}"


class ItemRef:
    __slots__ = ("container", "key")

    def __init__(self, container, key):
        self.container, self.key = container, key

    def get(self, args):
        try:
            return self.container[self.key]
        except (KeyError, IndexError):
            return None

    def set(self, args, t):
        self.container[self.key] = t

    def __str__(self) -> str:
        k = self.key
        k = f"<{k.dtype.name}{list(k.shape)}>" if isinstance(k, Tensor) else repr(k)
        return f"{type(self.container).__name__}[{k}]"


class AttrRef:
    __slots__ = ("obj", "name")

    def __init__(self, obj, name: str):
        self.obj, self.name = obj, name

    def get(self, args):
        return self.obj.__dict__.get(self.name)

    def set(self, args, t):
        self.obj.__dict__[self.name] = t

    def __str__(self) -> str:
        return f"{type(self.obj).__name__}.{self.name}"


class ObjRef:
    """One tensor object (a captured tensor no walk reached)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def get(self, args):
        return self.obj

    def set(self, args, t):
        raise TypeError("a captured tensor cannot be replaced")

    def __str__(self) -> str:
        return f"tensor<{self.obj.dtype.name}{list(self.obj.shape)}>"


class Target:
    """Where a replayed value goes: ``mode`` "buf" rebinds the tensor at ``ref``, "grad" sets its
    leaf gradient, "obj" stores a new tensor at ``ref``, "clear" sets the gradient to None."""

    __slots__ = ("ref", "mode")

    def __init__(self, ref, mode: str):
        self.ref, self.mode = ref, mode

    def read(self, args):
        """The buffer now at this place (None when there is none)."""
        t = self.ref.get(args)
        if t is None:
            return None
        if self.mode in ("grad", "clear"):
            g = t._node.grad if t._node is not None else None
            return None if g is None else g._buf
        return t._buf

    def write(self, args, value, buf) -> None:
        if self.mode == "obj":
            self.ref.set(args, _wrap(buf, value.shape, value.dtype, value.device))
            return
        t = self.ref.get(args)
        if self.mode == "buf":
            t._buf = buf
        elif self.mode == "grad":
            t._node.grad = _wrap(buf, value.shape, value.dtype, value.device)
        else:
            t._node.grad = None

    def __str__(self) -> str:
        return {"buf": str(self.ref), "grad": f"{self.ref}.grad", "obj": str(self.ref),
                "clear": f"{self.ref}.grad (None)"}[self.mode]


def flatten(obj, leaves: list, spec_of=None):
    """Tensors and other leaves of nested tuples, lists and dicts, and a spec to rebuild them."""
    t = type(obj)
    if t in (tuple, list):
        return (t, tuple(flatten(e, leaves) for e in obj))
    if t is dict:
        return (dict, tuple(obj), tuple(flatten(v, leaves) for v in obj.values()))
    leaves.append(obj)
    return None


def unflatten(spec, leaves):
    it = iter(leaves)

    def build(s):
        if s is None:
            return next(it)
        if s[0] is dict:
            return dict(zip(s[1], (build(e) for e in s[2])))
        return s[0](build(e) for e in s[1])

    return build(spec)


def tensor_meta(t: Tensor) -> tuple:
    n = t._node
    leaf_grad = n is not None and n.op is None and n.grad is not None
    return (t.shape, t.dtype, t.device, n is not None, leaf_grad)


def roots_of(fn, guard=None) -> list:
    """The objects ``fn`` can reach: bound ``self``, closure cells, the globals its code names
    (functions among them followed one level further). ``guard`` receives checks that the same
    globals and cells still hold the same objects."""
    out, seen = [], set()
    guard = [] if guard is None else guard

    def from_function(f, depth):
        if id(f) in seen:
            return
        seen.add(id(f))
        self_ = getattr(f, "__self__", None)
        if self_ is not None and not isinstance(self_, _SKIP):
            out.append(self_)
        f = getattr(f, "__func__", f)
        if not isinstance(f, types.FunctionType):
            if callable(f) and not isinstance(f, _SKIP) and hasattr(f, "__dict__"):
                out.append(f)  # a callable object (a Module): its state
            return
        for cell in f.__closure__ or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            guard.append(("c", cell, None, v, None))
            _take(v, depth)
        g = f.__globals__
        for name in _names(f.__code__):
            if name in g:
                v = g[name]
                if not isinstance(v, types.ModuleType):
                    guard.append(("g", g, name, v, None))
                _take(v, depth)

    def _take(v, depth):
        if isinstance(v, types.FunctionType) or isinstance(v, types.MethodType):
            if depth < 2:
                from_function(v, depth + 1)
        elif not isinstance(v, _SKIP) and type(v) not in _PLAIN:
            out.append(v)

    from_function(fn, 0)
    return out


def _names(code) -> set:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names


class Walk:
    """Tensor slots and the digest of everything reachable from some roots, and the *guard*: the
    same facts as a flat list of checks, ``(kind, container, key, expected, slot key)``, that
    :func:`holds` evaluates without walking again."""

    __slots__ = ("slots", "digest", "scalars", "guard", "copies")

    def __init__(self):
        self.slots: dict = {}    # (id(container), key id) -> (ref, tensor)
        self.digest: list = []   # (slot key, what) in visiting order
        self.scalars: dict = {}  # slot key -> (ref, value) for plain Python values
        self.guard: list = []
        self.copies: list = []   # (list or dict, shallow copy): to put containers back after a refused trace

    def put_back(self) -> None:
        """Give every list and dict (attribute dicts included) the entries it had during the walk."""
        for c, copy in self.copies:
            if type(c) is list:
                c[:] = copy
            elif len(c) != len(copy) or any(k not in c or c[k] is not v for k, v in copy.items()):
                c.clear()
                c.update(copy)

    def key_tuple(self, skip=frozenset()) -> tuple:
        return tuple(e for e in self.digest if e[0] not in skip)

    def guard_without(self, skip) -> list:
        return [e for e in self.guard if e[4] not in skip]


def holds(guard) -> bool:
    """Whether the state a guard describes is still there: same objects in the same places, the
    same container sizes, tensor metadata and plain values."""
    for kind, c, k, exp, _ in guard:
        if kind == "n":
            if len(c) != exp:
                return False
            continue
        try:
            v = c.cell_contents if kind == "c" else c[k]
        except (KeyError, IndexError, ValueError):
            return False
        if kind == "t":
            if not isinstance(v, Tensor) or tensor_meta(v) != exp:
                return False
        elif kind == "v":
            if type(v) is not type(exp) or (v != exp and not (v != v and exp != exp)):
                return False
        elif v is not exp:
            return False
    return True


def guard_function(guard):
    """:func:`holds` for one guard as a generated function of no arguments: the same checks
    written out one after another (no loop over the entries, no dispatch on their kind)."""
    ns: dict = {"Tensor": Tensor, "_meta": tensor_meta}
    lines = ["def holds():", "    try:", "        pass"]
    for j, (kind, c, k, exp, _) in enumerate(guard):
        ns[f"c{j}"], ns[f"k{j}"], ns[f"e{j}"] = c, k, exp
        if kind == "n":
            lines.append(f"        if len(c{j}) != e{j}: return False")
            continue
        lines.append(f"        v = c{j}.cell_contents" if kind == "c" else f"        v = c{j}[k{j}]")
        if kind == "t":
            lines.append(f"        if not isinstance(v, Tensor) or _meta(v) != e{j}: return False")
        elif kind == "v":
            ns[f"T{j}"] = type(exp)
            lines.append(f"        if type(v) is not T{j} or (v != e{j} and not (v != v and e{j} != e{j})): return False")
        else:
            lines.append(f"        if v is not e{j}: return False")
    lines += ["    except (KeyError, IndexError, ValueError):", "        return False", "    return True"]
    exec(compile("\n".join(lines) + "\n", f"<anydevice.jit guard of {len(guard)} checks>", "exec"), ns)  # noqa: S102
    return ns["holds"]


def walk(roots, skip_ids=frozenset(), guard=()) -> Walk:
    w = Walk()
    w.guard.extend(guard)
    seen = set(skip_ids)
    budget = [MAX_OBJECTS]

    def leaf(key, ref, v, depth, c, k):
        tv = type(v)
        if tv is Tensor or isinstance(v, Tensor):
            w.slots[key] = (ref, v)
            meta = tensor_meta(v)
            w.digest.append((key, meta))
            w.guard.append(("t", c, k, meta, key))
        elif tv in _PLAIN:
            w.scalars[key] = (ref, v)
            w.digest.append((key, v))
            w.guard.append(("v", c, k, v, key))
        elif depth < 8 and visit(v, depth + 1):  # a container: the same object must stay there
            w.guard.append(("o", c, k, v, key))

    def visit(obj, depth) -> bool:
        """Walk a container (dict, list, tuple, object with a ``__dict__``); False for anything else
        (arrays, buffers, locks, functions: opaque to the guard)."""
        t = type(obj)
        if isinstance(obj, _SKIP) or isinstance(obj, (types.FunctionType, types.MethodType, types.GeneratorType)):
            return False
        if not (t is list or t is tuple or isinstance(obj, dict) or type(getattr(obj, "__dict__", None)) is dict):
            return False
        if id(obj) in seen or budget[0] <= 0:
            return True
        seen.add(id(obj))
        budget[0] -= 1
        if t is dict or isinstance(obj, dict):
            if t is dict:
                w.copies.append((obj, dict(obj)))
            w.digest.append(((id(obj), None), len(obj)))
            w.guard.append(("n", obj, None, len(obj), (id(obj), None)))
            for k, v in list(obj.items())[:MAX_ITEMS]:
                leaf((id(obj), id(k) if isinstance(k, Tensor) else k), ItemRef(obj, k), v, depth, obj, k)
        elif t is list or t is tuple:
            if t is list:
                w.copies.append((obj, list(obj)))
            w.digest.append(((id(obj), None), len(obj)))
            w.guard.append(("n", obj, None, len(obj), (id(obj), None)))
            for k, v in enumerate(obj[:MAX_ITEMS]):
                leaf((id(obj), k), ItemRef(obj, k), v, depth, obj, k)
        else:
            d = obj.__dict__
            w.copies.append((d, dict(d)))
            w.digest.append(((id(obj), None), type(obj)))
            w.guard.append(("n", d, None, len(d), (id(obj), None)))
            for k, v in list(d.items())[:MAX_ITEMS]:
                leaf((id(obj), k), AttrRef(obj, k), v, depth, d, k)
        return True

    for r in roots:
        visit(r, 0)
    return w
