"""Static graphs: capture a function once into the graph IR (:mod:`anydevice.jit.ir`), replay it."""
from __future__ import annotations

from anydevice.jit.ir import Graph, Node, Value

__all__ = ["Graph", "Node", "Value"]
