"""The engine: the Tensor, the dispatcher (native kernel, decomposition, CPU fallback), autograd.

Modules: :mod:`~anydevice.engine.tensor` (the data model), :mod:`~anydevice.engine.graph`
(grad mode and recorded nodes), :mod:`~anydevice.engine.dispatch` (every op call, and the
namespace ``xp`` decompositions compute with), :mod:`~anydevice.engine.creation`,
:mod:`~anydevice.engine.autograd` (``backward``), :mod:`~anydevice.engine.methods` (Tensor
operators and methods, attached when ``anydevice`` is imported).
"""
