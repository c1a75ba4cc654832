"""Checks shared by the kernel configs of every architecture (plain Python, host side)."""

from dataclasses import fields


def check_field_types(config: object) -> None:
    """Every field of a config dataclass holds its declared type: a bool where it is declared
    ``bool``, else an int (not a bool). The annotation may be a string (postponed
    annotations)."""
    for f in fields(config):
        value = getattr(config, f.name)
        if f.type in (bool, "bool"):
            expected, ok = "a bool", isinstance(value, bool)
        else:
            expected, ok = "an int", isinstance(value, int) and not isinstance(value, bool)
        if not ok:
            raise TypeError(f"{f.name} must be {expected}, got {value!r} ({type(value).__name__})")


def check_choice(name: str, value: int, choices: tuple[int, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value}")
