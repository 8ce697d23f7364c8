"""The cpu backend: numpy buffers, native kernels for every op. Shipped with anydevice."""
