"""railplan: Rail-only networks for LLM-training GPU clusters."""

from __future__ import annotations

__version__ = "0.1.0"
