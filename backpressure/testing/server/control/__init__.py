"""The control plane: fail points, ingress rate limiters, server parameters, statistics."""
