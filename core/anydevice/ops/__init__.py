"""The op registry and the definitions of every op (one module per Array API category)."""
_loaded = False


def _load_all():
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import creation, elementwise, indexing, linalg, manipulation, nn, statistical  # noqa: F401
