"""The wire format shared by ``status --json``, the server and remote clients."""
