"""Triton kernels of the HGW routing op (placeholder until written)."""


def available():
    return False
