"""The application controller (Qt-free): typed requests in, typed records out.

See :mod:`app.core.control.controller`.
"""
