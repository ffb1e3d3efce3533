"""The one error type railplan raises for bad input.

Every message is a single line that names the offending field and what is allowed, so the CLI can
print it as is (exit code 2) and the Python API user sees the same text.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RailplanError(ValueError):
    """Bad input: the message names the field and the allowed values."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")

    def __reduce__(self) -> tuple[type[RailplanError], tuple[str, str]]:
        """Pickled by its two parts, so that it crosses from a worker process unchanged."""
        return (type(self), (self.field, self.problem))


def unknown_name(field: str, name: str, known: Iterable[str]) -> RailplanError:
    """Error for a name not in a catalog, listing the close matches (or all names if few)."""
    names = sorted(known)

    typed = "".join(c for c in name.lower() if c.isalnum())

    def starts_with_typed(known_name: str) -> bool:
        """Whether `known_name` begins with what was typed, case and separators ignored, up to
        a separator or its end ('gpt3' → gpt-3-175b, gpt-3.6b; not gpt-39b)."""
        matched = 0
        for c in known_name.lower():
            if matched == len(typed):
                return not c.isalnum()
            if c.isalnum():
                if c != typed[matched]:
                    return False
                matched += 1
        return matched == len(typed)

    # names that start with what was typed come first, then difflib's close matches
    close = [n for n in names if typed and starts_with_typed(n)][:5]
    close += difflib.get_close_matches(name, names, n=5, cutoff=0.4)
    close = list(dict.fromkeys(close))[:5]
    if close:
        hint = "did you mean " + ", ".join(close) + "?"
    else:
        hint = "known: " + ", ".join(names[:30]) + (" …" if len(names) > 30 else "")
    return RailplanError(field, f"unknown name {name!r}; {hint}")


def near_multiples(n: int, k: int) -> str:
    """The multiples of `k` nearest `n` from below and above, as text ("8,136 or 8,208")."""
    below, above = n // k * k, -(-n // k) * k
    if below == above:
        return f"{n:,}"
    return f"{above:,}" if below == 0 else f"{below:,} or {above:,}"
