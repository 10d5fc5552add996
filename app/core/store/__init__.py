"""Persistent history: an embedded SQLite database in the state directory.

``schema`` (the tables, the file's identity, its checks), ``packing`` (per-process
bytes packed in one blob per sample), ``tiers`` (retention and the size bound),
``query`` (``read_history``: read-only, never raises), ``writer`` (the thread that
aggregates ticks and commits), ``recorder`` (``HistoryRecorder``: what the sampler
calls, the single-writer lock, the one message), ``lock`` (the OS lock).
"""
