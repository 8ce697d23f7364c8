"""anydevice backend for OpenCL devices through pyopencl (device type ``opencl``).

On a CPU, PoCL provides the device: the distribution's ``pocl-opencl-icd`` (PoCL >= 3.1),
conda-forge's ``pocl``, or ``pip install anydevice-opencl[pocl]`` (PoCL 3.0, LLVM 14: not for
CPUs newer than LLVM 14). See the package README.
"""
