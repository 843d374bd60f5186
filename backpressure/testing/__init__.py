"""Testing tools: an embedded MongoDB-compatible server with fail points and rate limiters."""
