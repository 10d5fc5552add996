"""Names vulture cannot see used: called by a framework, not by our code.

``.ci/dead_code.py`` treats every name below as used.  Only names some
framework or protocol calls belong here.
"""

from vulture.whitelist_utils import Whitelist

_ = Whitelist()

# Qt virtual methods, called by Qt on the subclasses that override them.
_.paintEvent
_.sizeHint
_.minimumSizeHint
_.eventFilter
_.event
_.resizeEvent
_.showEvent
_.closeEvent
_.changeEvent
_.mousePressEvent
_.mouseMoveEvent
_.leaveEvent
_.contextMenuEvent
# QAbstractItemModel: the view asks for these.
_.data
_.headerData
_.rowCount
_.columnCount
_.flags
_.sort
# A QStyleOption's fields, read by the style that draws it.
_.backgroundColor
# pyqtgraph's AxisItem asks for the tick labels.
_.tickStrings
# QDBusVirtualObject: the bus calls handleMessage(message, connection).
_.handleMessage
_.connection
# D-Bus signal slots connected by their signature string ("_on_...(QDBusMessage)").
_._on_action_invoked
_._on_notification_closed
# selectionChanged(selected, deselected): the signal's signature names both.
_.deselected
# pg.SignalProxy works only while referenced: the attribute keeps it alive.
_._mouse_proxy

# Python protocols: __reduce_ex__(protocol) signature; an exception's cause is
# read by the traceback machinery.
_.protocol_
_.__cause__

# Read by the agent benchmark's child script (benchmarks/bench_agent.py, inside a string).
_.torch_setup_seconds
# Fields of the agent's report, parsed as the protocol defines them.
_.requested

# http.server: the server and its handler read these class attributes and call these methods.
_.daemon_threads
_.allow_reuse_address
_.request_queue_size
_.address_family
_.handle_error
_.server_version
_.log_message
_.do_GET
_.do_POST
_.close_connection
_._update_peak_stats  # MemTracker calls it on every op (app/core/estimate/trace.py)
