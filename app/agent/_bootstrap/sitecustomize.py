"""VRAM Steward launcher bootstrap (first on PYTHONPATH via ``main.py run``).

1. Chains any other ``sitecustomize`` further on sys.path (errors in it are
   reported like site.py does, never crash the process).
2. If VRAM_STEWARD_AGENT == "1", imports vram_steward_agent and starts it.
"""


def _chain() -> None:
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.get("sitecustomize")
    removed = [p for p in sys.path if os.path.abspath(p or os.getcwd()) == here]
    sys.path[:] = [p for p in sys.path if p not in removed]
    sys.modules.pop("sitecustomize", None)
    try:
        try:
            # the user's own, if any: found on sys.path at run time only
            import sitecustomize  # type: ignore[import-not-found]  # noqa: F401
        except ImportError as exc:
            if exc.name != "sitecustomize":
                raise
            if ours is not None:
                sys.modules["sitecustomize"] = ours
    except Exception as err:
        if ours is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = ours
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             "%s: %s\n" % (err.__class__.__name__, err))
    finally:
        sys.path[0:0] = removed


def _start() -> None:
    import os
    if os.environ.get("VRAM_STEWARD_AGENT") != "1":
        return
    # this file's neighbour, on sys.path at run time (not a package mypy sees)
    import vram_steward_agent  # type: ignore[import-not-found]
    vram_steward_agent.start()


try:
    _chain()
except Exception:
    pass
try:
    _start()
except Exception:
    pass
