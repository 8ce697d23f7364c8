"""The optional C extensions; everything else is in pyproject.toml. Without a C compiler the build
skips them: the cpu backend then uses numpy alone and the dispatcher its Python hit path.

- ``anydevice_cpu._native``: the cpu backend's C kernels;
- ``anydevice.engine._hit``: the dispatcher's call-cache hit;
- ``anydevice.runtime._alloc``: the caching allocator's reuse of the chunk freed last.
"""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("anydevice_cpu._native", sources=["backends/cpu/anydevice_cpu/_native.c"], optional=True,
              extra_compile_args=["-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math"]),
    Extension("anydevice.engine._hit", sources=["core/anydevice/engine/_hit.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("anydevice.runtime._alloc", sources=["core/anydevice/runtime/_alloc.c"], optional=True,
              extra_compile_args=["-O2"]),
])
