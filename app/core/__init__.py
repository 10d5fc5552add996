"""Qt-free core: monitor (sources, collector, history, plot data), agents (the
directory, hub, events), policies, control (the application controller) and
units.  Importable headless."""
