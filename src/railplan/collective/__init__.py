"""Collectives past alpha-beta rings: closed forms per algorithm and a max-flow lower bound."""
