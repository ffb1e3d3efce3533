"""Reproductions of the Rail-only paper's figures: our numbers beside the paper's."""
