"""Tools over the public API: the health check, benchmarks, the profiler and the command line."""
