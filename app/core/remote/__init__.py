"""A server on another host, seen through the seams the local parts use:
``RemoteSource`` (a GPU source) and ``RemoteAgents`` (an agent directory)."""
