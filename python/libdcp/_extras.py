"""The optional dependencies, imported in one place: when one is missing, the error says which
extra of the package installs it (a bare ``No module named 'torch'`` does not)."""
from typing import Any

TORCH_EXTRA = "libdcp[torch]"  # pyproject.toml's [project.optional-dependencies] torch


def import_torch(user: str) -> Any:
    """The torch module; ModuleNotFoundError (an ImportError) naming ``user`` (what needs it)
    and the ``[torch]`` extra when torch is not installed."""
    try:
        import torch
    except ModuleNotFoundError as missing:
        if missing.name != "torch":  # torch is there but broken: its own error says why
            raise
        raise ModuleNotFoundError(
            f"{user} needs torch (>= 2.4), which is not installed: pip install "
            f"'{TORCH_EXTRA}' (from a checkout: pip install './python[torch]')",
            name="torch") from None
    return torch
