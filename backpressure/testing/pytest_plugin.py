"""pytest fixtures that start the embedded server on ephemeral ports."""
