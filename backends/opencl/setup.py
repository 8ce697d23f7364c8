"""The optional C extension; everything else is in pyproject.toml. Without a C compiler the build
skips it and the element-wise launches go through pyopencl.

- ``anydevice_opencl._launch``: the element-wise launch (``Launcher.arrays``) in C.
"""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("anydevice_opencl._launch", sources=["anydevice_opencl/_launch.c"], optional=True,
              extra_compile_args=["-O2"]),
])
