"""VRAM Steward: see which processes hold your GPU memory, and why."""

__version__ = "0.1.0"
APP_NAME = "VRAM Steward"
