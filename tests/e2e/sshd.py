"""A real OpenSSH server for the SSH tests (``test_ssh_remote``,
``test_remote_hosts``): ``/usr/sbin/sshd`` on a free loopback port with its
own host key, config and one authorized key for root, and client configs
that use them.

Needs root (sshd, and a login as root), sshd, ssh and ssh-keygen; makes
``/run/sshd`` when missing, as the openssh-server service does.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.fakes.processes import end, wait_for

SSHD = "/usr/sbin/sshd"


def unavailable_reason() -> str | None:
    """Why no sshd can be run here for the tests, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: sshd runs on a loopback port and the test logs in as root"
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen")):
        if not tool or not os.access(tool, os.X_OK):
            return f"{tool or 'ssh/ssh-keygen'} is missing (packages openssh-server, " \
                   "openssh-client)"
    return None


def keygen(path: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vst-test", "-f",
                    path], check=True, capture_output=True, timeout=30)
    return Path(path + ".pub").read_text().strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    """``sshd -D -e`` on 127.0.0.1:PORT, letting in one key for root.

    ``known_hosts`` (in ``folder``) names its host key; :meth:`client_config`
    uses it, :meth:`stranger_config` knows no host key at all."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="vst-sshd-")
        # sshd's privilege separation folder, as the package's service makes it (and leaves it)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        host_key = os.path.join(self.folder, "host_key")
        host_pub = keygen(host_key)
        self.key = os.path.join(self.folder, "client_key")
        Path(self.folder, "authorized_keys").write_text(keygen(self.key) + "\n")
        self.port = free_port()
        config = Path(self.folder, "sshd_config")
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
            f"AuthorizedKeysFile {self.folder}/authorized_keys", "PidFile none",
            "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UseDNS no",
            "PrintMotd no", "LogLevel VERBOSE"]) + "\n")
        self.known_hosts = os.path.join(self.folder, "known_hosts")
        Path(self.known_hosts).write_text(f"[127.0.0.1]:{self.port} {host_pub}\n")
        self.log = open(os.path.join(self.folder, "sshd.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        try:
            wait_for("sshd to listen", self._listening, timeout=15, every=0.05)
        except BaseException:
            self.stop()
            raise

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"sshd exited: {Path(self.log.name).read_text()}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def client_config(self, key: str | None = None, name: str = "ssh_config") -> str:
        """A client config that logs in with ``key`` and knows this server's host key."""
        path = os.path.join(self.folder, name)
        Path(path).write_text("\n".join([
            "Host *", f"  IdentityFile {key or self.key}", "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {self.known_hosts}", "  StrictHostKeyChecking yes",
            "  GlobalKnownHostsFile /dev/null", "  LogLevel ERROR"]) + "\n")
        return path

    def stranger_config(self, name: str = "stranger_ssh_config") -> str:
        """A client config with the login key and no known host key at all, and
        ssh's own default for an unknown one (it would ask)."""
        path = os.path.join(self.folder, name)
        empty = os.path.join(self.folder, f"{name}_known_hosts")
        Path(empty).write_text("")
        Path(path).write_text("\n".join([
            "Host *", f"  IdentityFile {self.key}", "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {empty}", "  GlobalKnownHostsFile /dev/null",
            "  LogLevel ERROR"]) + "\n")
        return path

    def stop(self) -> None:
        end(self.proc)
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)
