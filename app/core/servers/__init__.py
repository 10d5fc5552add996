"""Model servers (Ollama, ComfyUI, AUTOMATIC1111, LM Studio, ...): recognised
from the host's process list, read and unloaded through their own APIs."""
