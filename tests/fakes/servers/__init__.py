"""Fake model servers: Ollama, ComfyUI, AUTOMATIC1111/Forge, LM Studio,
text-generation-webui, and one that never answers.

Each is a real process with the real server's command line and process name,
listening on loopback, answering the real server's routes with the real
shapes (built from their sources and docs; see each module's docstring), and
holding its "VRAM" in the ABI fake of libnvidia-ml through per-process
allocation files (``tests.fakes.nvml_abi.write_allocation``), so a reader in
live mode sees the memory come and go as models load and unload.

The modules import only the standard library: the fakes run under the bare
base interpreter (``PYTHONPATH`` = the repository root), not this venv.
``world.ServerWorld`` starts them for tests.
"""
