"""Static graphs: trace a function once into the graph IR, replay the graph afterwards.

``anydevice.jit.compile(fn)`` (alias ``to_static``, also ``anydevice.compile``) traces ``fn`` on
its first call for each input signature into a :class:`~anydevice.jit.ir.Graph` of registry ops
(:mod:`anydevice.jit.capture`), runs the graph passes (:mod:`anydevice.jit.passes`) and replays
the graph on later calls, writing parameter, gradient and optimizer-state updates back.
Python control flow runs once, at trace time.
"""
from __future__ import annotations

from anydevice.jit.api import CompiledFunction, JitWarning, compile, eager, to_static
from anydevice.jit.capture import TraceError
from anydevice.jit.check import CheckError
from anydevice.jit.ir import Graph, Node, Value

__all__ = ["compile", "to_static", "eager", "CompiledFunction", "TraceError", "CheckError", "JitWarning",
           "Graph", "Node", "Value"]
