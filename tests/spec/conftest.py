"""Shared pieces of the spec suites: where the spec files are, and deployments per topology.

The official files are data kept outside the repository, in ``../shared/spec-tests`` relative to
the repository root; our own scenarios are in ``spec-tests/``. Tests run against ``MONGODB_URI``
when it is set, else against the session-wide embedded servers of the ``backpressure`` pytest
plugin (``standalone_server``, ``replicaset_server``, ``sharded_server``; reset per test).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Callable

import pytest

from backpressure.testing.unified import Deployment

DeploymentFor = Callable[[str], Deployment]


@pytest.fixture(scope="session")
def _spec_deployments() -> Iterator[dict[object, Deployment]]:
    """Deployments by server (or URI), closed at the end of the session."""
    cache: dict[object, Deployment] = {}
    yield cache
    for deployment in cache.values():
        deployment.close()


@pytest.fixture
def spec_deployment(
    request: pytest.FixtureRequest, _spec_deployments: dict[object, Deployment]
) -> DeploymentFor:
    """Return the deployment for a topology (``MONGODB_URI`` wins over the embedded servers)."""

    def deployment_for(topology: str) -> Deployment:
        uri = os.environ.get("MONGODB_URI")
        if uri:
            key: object = uri
            if key not in _spec_deployments:
                _spec_deployments[key] = Deployment(uri)
            return _spec_deployments[key]
        server = request.getfixturevalue(f"{topology}_server")
        key = id(server)
        if key not in _spec_deployments:
            _spec_deployments[key] = Deployment(server.uri, server=server)
        return _spec_deployments[key]

    return deployment_for
