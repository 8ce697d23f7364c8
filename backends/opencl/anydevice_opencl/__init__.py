"""anydevice backend for OpenCL devices through pyopencl (device type ``opencl``).

Install with ``pip install anydevice-opencl[pocl]`` to get PoCL, a CPU OpenCL implementation.
"""
