"""Add a host: its URL, and what reaching it takes (a token file and a
certificate for ``https://``, the remote command for ``ssh://``).

OK hands the host to ``validate`` (the Hosts dialog's check); an error is
shown here and the dialog stays open, so the user fixes it in place and
nothing is added.  The token itself is never asked for: only the path of a
private file holding it (``serve`` wrote one).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core.remote.host_config import HostConfig
from app.ui.style import palette as pal
from app.ui.style.text import plain_label

#: The host's check: None when it was taken, else what is wrong.
Validate = Callable[[HostConfig], "str | None"]


class AddHostDialog(QDialog):
    def __init__(self, validate: Validate, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("addHostDialog")
        self.setWindowTitle("Add a host")
        self._validate = validate
        self.added: HostConfig | None = None
        lay = QVBoxLayout(self)
        intro = QLabel("A host runs <tt>vram-steward serve</tt>: reach it over SSH "
                       "(<tt>ssh://user@gpu1</tt>, nothing to open on the host) or HTTPS "
                       "with a token (<tt>https://gpu1:8443</tt>).", self)
        intro.setWordWrap(True)
        lay.addWidget(intro)
        form = QFormLayout()
        self.url_edit = QLineEdit(self)
        self.url_edit.setObjectName("hostUrl")
        self.url_edit.setPlaceholderText("ssh://user@gpu1 or https://gpu1:8443")
        self.url_edit.textChanged.connect(self._sync)
        form.addRow("URL", self.url_edit)
        self.token_edit, token_row = self._file_row(
            "hostTokenFile", "a private file (chmod 600) holding a token of the server's "
            "token file", "Token file")
        form.addRow("Token file", token_row)
        self.ca_edit, ca_row = self._file_row(
            "hostCaFile", "the server's certificate, when it is self-signed", "Certificate")
        form.addRow("Certificate", ca_row)
        self.command_edit = QLineEdit(self)
        self.command_edit.setObjectName("hostRemoteCommand")
        self.command_edit.setPlaceholderText("vram-steward (on the host's PATH)")
        self.command_edit.setToolTip("What starts VRAM Steward on the host, e.g. "
                                     "~/venv/bin/vram-steward")
        form.addRow("Remote command", self.command_edit)
        lay.addLayout(form)
        self.error_label = plain_label(QLabel(self))  # names the URL and files given
        self.error_label.setObjectName("addHostError")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(
            f"color: {pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]};")
        self.error_label.hide()
        lay.addWidget(self.error_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.buttons = buttons
        self._sync()
        self.resize(520, self.sizeHint().height())

    def _file_row(self, name: str, tip: str, title: str) -> tuple[QLineEdit, QWidget]:
        row = QWidget(self)
        lay = QHBoxLayout(row)
        lay.setContentsMargins(0, 0, 0, 0)
        edit = QLineEdit(row)
        edit.setObjectName(name)
        edit.setToolTip(tip)
        browse = QPushButton("Browse…", row)
        browse.clicked.connect(lambda: self._browse(edit, title))
        lay.addWidget(edit, 1)
        lay.addWidget(browse)
        return edit, row

    def _browse(self, edit: QLineEdit, title: str) -> None:
        path, _filter = QFileDialog.getOpenFileName(self, title, edit.text())
        if path:
            edit.setText(path)

    def _sync(self, *_args: object) -> None:
        """The fields that apply to the URL's scheme; the others off."""
        scheme = self.url_edit.text().strip().lower().partition("://")[0]
        known = scheme in ("ssh", "http", "https")
        self.token_edit.parentWidget().setEnabled(not known or scheme != "ssh")
        self.ca_edit.parentWidget().setEnabled(not known or scheme == "https")
        self.command_edit.setEnabled(not known or scheme == "ssh")

    def config(self) -> HostConfig:
        """The host as typed (fields that do not apply to its scheme left out)."""
        def text(edit: QLineEdit) -> str | None:
            return (edit.text().strip() or None) if edit.isEnabled() else None

        return HostConfig(self.url_edit.text().strip(), text(self.token_edit),
                          text(self.ca_edit), text(self.command_edit))

    def accept(self) -> None:
        config = self.config()
        error = self._validate(config)
        if error is not None:
            self.error_label.setText(error)
            self.error_label.show()
            return
        self.added = config
        super().accept()


__all__ = ["AddHostDialog"]
