"""Exploration: the vectorized search over strategies and sweeps over a grid of systems."""
