"""Qt-free core: sources, samples, history, collector. Importable headless."""
