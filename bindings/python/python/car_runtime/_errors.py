"""The exceptions of car_runtime, defined in Python so that they live in the
``car_runtime`` module, pickle, and carry ``.details`` as a dict. The native
extension raises these very classes (it looks them up here)."""

from typing import Any, Dict, Optional, Tuple


class CarError(Exception):
    """Base of every car-runtime error: ``.code`` (a stable snake_case string),
    ``.message``, ``.family`` (``input``, ``config``, ``not_found``,
    ``runtime``) and ``.details`` (a dict; ``{}`` when there are none)."""

    _family = "runtime"

    def __init__(
        self,
        message: str = "",
        code: str = "internal_error",
        family: Optional[str] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.family = family if family is not None else self._family
        self.details: Dict[str, Any] = dict(details) if details else {}

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r})"

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.message, self.code, self.family, self.details), self.__dict__)


class CarInputError(CarError):
    """A bad input document or argument."""

    _family = "input"


class CarConfigError(CarError):
    """A configuration problem (policy file, tool definition, preset)."""

    _family = "config"


class CarNotFoundError(CarError):
    """A lookup of something that does not exist."""

    _family = "not_found"


class CarRuntimeError(CarError):
    """A failure while executing."""

    _family = "runtime"


class TerminalToolError(Exception):
    """Raised by a tool: stop retries, abort and roll back the proposal."""


class ModelRetry(Exception):
    """Raised by a tool: the model called it wrongly; the message tells it how
    to correct the call. Reported in the result as ``model retry (n of 2):
    <message>``, never retried by the engine, bounded to 2 per call chain."""


for _cls in (CarError, CarInputError, CarConfigError, CarNotFoundError, CarRuntimeError, TerminalToolError, ModelRetry):
    _cls.__module__ = "car_runtime"
del _cls

BY_FAMILY = {
    "input": CarInputError,
    "config": CarConfigError,
    "not_found": CarNotFoundError,
    "runtime": CarRuntimeError,
}


def make(message: str, code: str, family: str, details_json: str) -> CarError:
    """Called by the native extension: the exception for a facade error."""
    import json

    try:
        details = json.loads(details_json)
    except ValueError:
        details = {}
    if not isinstance(details, dict):
        details = {"value": details}
    return BY_FAMILY.get(family, CarRuntimeError)(message, code, family, details)
