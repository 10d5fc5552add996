"""``serve``: the app's core running headless on a GPU host, with an API,
a live stream, Prometheus metrics and the action verbs.  No Qt."""
