"""Placement of ranks on HB domains and rails, the per-GPU-pair traffic matrix of one iteration,
and its plots."""
