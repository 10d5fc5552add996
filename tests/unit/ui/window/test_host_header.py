"""A host group's header shows the host's words as text: a server's name or an
ssh banner in the reason that looks like HTML is shown literally."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.monitor.hosts import DISCONNECTED, HostView
from app.ui.window.host_header import HostHeader

HOSTILE = "<b>x</b> <img src=/etc/x>"


def test_the_hosts_name_and_reason_are_plain_text(qtbot):
    header = HostHeader("gpu1")
    qtbot.addWidget(header)
    view = HostView("gpu1", "ssh://gpu1", DISCONNECTED, 0.0, f"banner: {HOSTILE}\nretrying",
                    name=HOSTILE)
    header.set_group(view, ())
    for label in (header.title_label, header.name_label, header.state_label,
                  header.reason_label, header.fullest_label):
        assert label.textFormat() == Qt.TextFormat.PlainText
    assert header.text_of(header.name_label) == f"({HOSTILE})"
    assert header.text_of(header.reason_label) == f"banner: {HOSTILE} retrying"
    for tip in (header.toolTip(), header.reason_label.toolTip()):
        assert "<img" not in tip and "&lt;b&gt;x&lt;/b&gt; &lt;img src=/etc/x&gt;" in tip
    assert header.toolTip().startswith('<qt style="white-space:pre">gpu1: ssh://gpu1\n')
