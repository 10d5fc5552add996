"""End-to-end tests: real child processes, the real agent, the real CLI."""
