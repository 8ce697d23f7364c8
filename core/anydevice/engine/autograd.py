"""Reverse-mode automatic differentiation over the registry's VJP rules.

``backward()`` walks the graph recorded by the dispatcher (:mod:`anydevice.engine.graph`) in
reverse topological order, calling each op's ``vjp(xp, g, inputs, out, **attrs)`` with the
engine's namespace ``xp``.
"""
from __future__ import annotations

from anydevice.engine.creation import asarray
from anydevice.engine.dispatch import xp
from anydevice.engine.graph import Node, Parts, no_grad
from anydevice.engine.tensor import Tensor


def _toposort(root: Node) -> list:
    """The nodes ``root`` depends on, each after every node that uses it, depth first (Kahn's
    algorithm on a stack): a leaf comes right after its last user, so its gradient is complete,
    and its hooks run, as early in ``backward()`` as it can be (data-parallel training starts
    reducing it then)."""
    users, stack = {}, [root]
    while stack:
        for p in stack.pop().parents:
            if p is not None:
                k = id(p)
                c = users.get(k)
                if c is None:
                    users[k] = 1
                    stack.append(p)
                else:
                    users[k] = c + 1
    order, ready = [], [root]
    while ready:
        node = ready.pop()
        order.append(node)
        for p in node.parents:
            if p is not None:
                k = id(p)
                c = users[k] - 1
                users[k] = c
                if not c:
                    ready.append(p)
    return order


def backward(tensor, grad=None, retain_graph: bool = False) -> None:
    """Accumulate d(tensor)/d(leaf) into every leaf's ``.grad``.

    The values the graph saved for its gradients are freed afterwards, so memory returns and
    a second ``backward()`` through the same graph raises; ``retain_graph=True`` keeps them
    for another call.
    """
    node = tensor._node
    if node is None:
        raise RuntimeError(
            "backward(): this tensor does not require grad and has no graph; set requires_grad=True on "
            "the inputs before computing it (and not inside no_grad())"
        )
    if grad is None:
        if tensor.size != 1:
            raise RuntimeError(
                f"backward(): grad can be omitted only for a single-element output, this one has shape {tensor.shape}; "
                "pass grad= of the same shape"
            )
        grad = xp.ones_like(tensor)
    elif not isinstance(grad, Tensor):
        grad = asarray(grad, dtype=tensor.dtype, device=tensor.device)
    if grad.shape != tensor.shape:
        raise ValueError(f"backward(): grad has shape {grad.shape}, the tensor has {tensor.shape}")
    order = _toposort(node)
    for used in order:
        if used.inputs is not None or used.op is None:
            continue
        raise RuntimeError(
            f"backward(): the graph through {used.op.name} was already used by an earlier backward(), which freed "
            "the values it saved; pass retain_graph=True to the first backward() to call it again, or compute "
            "the result again"
        )
    grads = {id(node): grad}
    with no_grad():
        for n in order:
            g = grads.pop(id(n), None)
            if g is not None and (n.op is None or n.retain):
                n.grad = g if n.grad is None else n.grad + g
            if n.op is None:
                if g is not None and n.hooks:
                    for hook in n.hooks:
                        hook()
                continue
            if g is not None:
                _propagate(n, g, grads)
            if not retain_graph:
                n.inputs = n.out = None


def _propagate(n: Node, g, grads: dict) -> None:
    """Send the gradient ``g`` of node ``n``'s output to its parents (summed per parent)."""
    if type(g) is Parts:  # the node of a multi-output op: one gradient per output
        g = g.filled(xp, n.out)
    vjp = n.op.vjp
    if getattr(vjp, "partial", False):  # it skips the gradients of inputs that need none
        in_grads = vjp(xp, g, n.inputs, n.out, needs=tuple([p is not None for p in n.parents]), **n.attrs)
    else:
        in_grads = vjp(xp, g, n.inputs, n.out, **n.attrs)
    if not isinstance(in_grads, (tuple, list)):
        in_grads = (in_grads,)
    for p, gi, dt in zip(n.parents, in_grads, n.in_dtypes):
        if p is None or gi is None:
            continue
        if dt is not None and gi.dtype is not dt:
            gi = xp.astype(gi, dt)
        prev = grads.get(id(p))
        grads[id(p)] = gi if prev is None else prev + gi
