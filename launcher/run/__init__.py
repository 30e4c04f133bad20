"""Impure running: raise limits, spawn torchrun, watch it, stop it; plus the pure classify and degrade."""
