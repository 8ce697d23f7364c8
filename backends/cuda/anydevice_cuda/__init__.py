"""NVIDIA CUDA backend for anydevice, built on CuPy. Entry point: ``anydevice_cuda.plugin``."""
