"""Shared pieces of the spec suites: where the spec files are, and deployments per topology.

The official files are data kept outside the repository, in ``../shared/spec-tests`` relative to
the repository root; our own scenarios are in ``spec-tests/``. Tests run against ``MONGODB_URI``
when it is set, else against the session-wide embedded servers of the ``backpressure`` pytest
plugin (``standalone_server``, ``replicaset_server``, ``sharded_server``; reset per test).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Callable, Optional

import pytest

from backpressure.testing import EmbeddedServer
from backpressure.testing.unified import Deployment

DeploymentFor = Callable[..., Deployment]


@pytest.fixture(scope="session")
def _spec_deployments() -> Iterator[dict[object, Deployment]]:
    """Deployments by server (or URI), closed at the end of the session."""
    cache: dict[object, Deployment] = {}
    yield cache
    for deployment in cache.values():
        deployment.close()


@pytest.fixture(scope="session")
def _versioned_servers() -> Iterator[dict[tuple[str, str], EmbeddedServer]]:
    """Embedded servers of another version profile than the default, by (topology, version)."""
    servers: dict[tuple[str, str], EmbeddedServer] = {}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def spec_deployment(
    request: pytest.FixtureRequest,
    _spec_deployments: dict[object, Deployment],
    _versioned_servers: dict[tuple[str, str], EmbeddedServer],
) -> DeploymentFor:
    """Return the deployment for a topology (``MONGODB_URI`` wins over the embedded servers);
    ``server_version`` asks for an embedded server of that version profile."""

    def deployment_for(topology: str, server_version: Optional[str] = None) -> Deployment:
        uri = os.environ.get("MONGODB_URI")
        if uri:
            key: object = uri
            if key not in _spec_deployments:
                _spec_deployments[key] = Deployment(uri)
            return _spec_deployments[key]
        if server_version is not None:
            versioned = (topology, server_version)
            if versioned not in _versioned_servers:
                _versioned_servers[versioned] = EmbeddedServer(
                    topology, server_version=server_version
                ).start()
            server = _versioned_servers[versioned]
            server.reset()
        else:
            server = request.getfixturevalue(f"{topology}_server")
        key = id(server)
        if key not in _spec_deployments:
            _spec_deployments[key] = Deployment(server.uri, server=server)
        return _spec_deployments[key]

    return deployment_for
