"""The cpu backend's optional C kernels (``anydevice_cpu._native``); everything else is in
pyproject.toml. Without a C compiler the build skips them and the backend uses numpy alone."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "anydevice_cpu._native", sources=["backends/cpu/anydevice_cpu/_native.c"], optional=True,
    extra_compile_args=["-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math"],
)])
