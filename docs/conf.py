"""Sphinx configuration: Markdown pages (MyST), the furo theme, the API reference from docstrings.

``make docs`` builds with ``-W -n`` (warnings are errors, every reference must resolve) and no
network: there is no intersphinx, so references into other projects are listed below as known
external targets rather than fetched.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sphinx.ext.napoleon.docstring import GoogleDocstring  # noqa: E402

import backpressure  # noqa: E402

project = "pymongo-backpressure"
author = "pymongo-backpressure developers"
copyright = "pymongo-backpressure developers"
release = backpressure.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"pymongo-backpressure {release}"
html_static_path = ["_static"]
html_css_files = ["tables.css"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_default_options = {"members": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Strict, but offline: names from other projects (pymongo, Motor, the standard library,
# prometheus-client, OpenTelemetry) cannot be resolved without intersphinx, so they are known
# external targets; every reference into this package must still resolve.
_EXTERNAL = (
    r"(typing|typing_extensions|collections|collections\.abc|types|enum|random|threading"
    r"|contextlib|asyncio|logging|pathlib|datetime|dataclasses|abc)\..*",
    r"(pymongo|bson|motor|mongomock|prometheus_client|opentelemetry)(\..*)?",
    r"(Any|Optional|Union|Callable|Iterator|Iterable|Sequence|Mapping|Protocol|TypeVar|ClassVar"
    r"|Self|Literal|NoReturn|Awaitable|Coroutine|AsyncIterator|Generator|TracebackType)",
    r"(int|float|str|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|Exception"
    r"|BaseException|ImportError|UserWarning|ValueError|TypeError|RuntimeError)",
    r"(C|T|_T|_DocumentType|ModuleType|Budget|C_co)",
)
nitpick_ignore_regex = [(r"py:.*", pattern) for pattern in _EXTERNAL]

# Internal names that signatures mention but the reference does not document: type variables,
# aliases, private names and helper classes of the implementation, and its modules.
_INTERNAL_CLASSES = (
    "C|T|_DocumentType|PolicySetting|OperationSettings|Budget|ClientState|TypeRegistry|SlotGrant"
    "|Refusal|Pacing|LogRateLimit|StatsRecorder|AttemptLedger|ServerPacer|ServerPacerSnapshot"
    "|MetricsBackend|PrometheusMetrics|OpenTelemetryMetrics|MemberRef|Deployment"
)
_INTERNAL = (
    rf"(backpressure\.[\w.]*\.)?({_INTERNAL_CLASSES})",
    r"backpressure\.[\w.]*\._\w+",
    r"tuple\[~typing\.Any",  # a nested annotation the signature parser splits
)
nitpick_ignore_regex += [(r"py:.*", pattern) for pattern in _INTERNAL]
nitpick_ignore_regex += [(r"py:mod", r"backpressure\.[\w.]+")]


def _no_inline_attribute_type(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Read an attribute docstring as prose: "Label for logs: not compared" has no type."""
    lines = [self._lines.next(), *self._dedent(self._consume_to_end())]
    return "", self.__class__(lines, self._config).lines()


GoogleDocstring._consume_inline_attribute = _no_inline_attribute_type

_PUBLIC = {
    **{name: f"backpressure.{name}" for name in backpressure.__all__},
}


def _public_alias(app, env, node, contnode):  # type: ignore[no-untyped-def]
    """Resolve ``backpressure.core.policy.Policy`` or a bare ``Policy`` to ``backpressure.Policy``.

    Docstrings name a class where it is defined; the reference documents it where users import
    it.  Only names of ``backpressure.__all__`` and of the documented public modules are
    redirected, so a reference to anything else still fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    name = target.rsplit(".", 1)[-1]
    if name not in _PUBLIC or not re.fullmatch(r"(backpressure\.[\w.]+\.)?\w+", target):
        return None
    node["reftarget"] = _PUBLIC[name]
    domain = env.get_domain("py")
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], _PUBLIC[name], node, contnode
    )


# The committed results files link to each other as files side by side in bench/results/; on
# the simulator results page, where both are included, those links point at their sections.
_RESULT_LINKS = {
    "](fleet.md)": "](#the-real-fleet-run-of-the-agreement-table)",
    "](sim-fleet.md)": "](#yardsticks)",
    "[fleet.json](fleet.json)": "`bench/results/fleet.json`",
}


def _result_links(app, relative_path, parent_docname, content):  # type: ignore[no-untyped-def]
    """Rewrite the links between included results files (the files themselves are untouched)."""
    if relative_path.parent.name == "results":
        for old, new in _RESULT_LINKS.items():
            content[0] = content[0].replace(old, new)


def setup(app):  # type: ignore[no-untyped-def]
    """Register the alias resolver and the results-link rewriter."""
    app.connect("missing-reference", _public_alias)
    app.connect("include-read", _result_links)
