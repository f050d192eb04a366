"""Import paths `module:function` (e.g. `mymod:myreward`, `trl.rewards:think_format_reward`): a task or
reward function named in the config is imported where the run executes (this process, a pool worker, a
Ray task), so nothing has to be registered by mutating a dict at run time."""

import importlib
import os
import re
import sys
from collections.abc import Callable

IMPORT_PATH = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*")
"""`package.module:attribute`"""


def is_import_path(text: str) -> bool:
    return IMPORT_PATH.fullmatch(text) is not None


def resolve(path: str, what: str) -> Callable:
    """The callable that `path` ('module:function') names. A module that is not importable is also
    looked up in the current directory (the `grpo-lab` script does not put it on the Python path)."""
    if not is_import_path(path):
        raise ValueError(f"{what} {path!r} is not an import path; expected 'module:function'")
    module_name, attr = path.split(":")
    try:
        module = _import(module_name)
    except ModuleNotFoundError as err:
        raise ValueError(
            f"{what} {path!r} does not resolve: no module named {err.name!r} on the Python path "
            f"(or in the current directory {os.getcwd()})"
        ) from err
    except Exception as err:
        raise ValueError(
            f"{what} {path!r}: importing {module_name!r} raised {type(err).__name__}: {err}"
        ) from err
    if not hasattr(module, attr):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ValueError(
            f"{what} {path!r} does not resolve: module {module_name!r} has no attribute {attr!r}; "
            f"its callables: {', '.join(public) or 'none'}"
        )
    fn = getattr(module, attr)
    if not callable(fn):
        raise ValueError(f"{what} {path!r} is a {type(fn).__name__}, not a function")
    return fn


def _import(module_name: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        top = module_name.split(".")[0]
        if err.name != top or os.getcwd() in sys.path or "" in sys.path:
            raise
    sys.path.append(os.getcwd())
    return importlib.import_module(module_name)
