"""Foundations that import nothing of anydevice: dtypes and errors."""
