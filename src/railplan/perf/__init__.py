"""Performance: compute and collective times, layout of groups over HB domains, the iteration
model and the scalar estimate over it."""
