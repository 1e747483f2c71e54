"""memhoncho's pytest fixtures, for its own suite and for a host's: ``pytest -p
memhoncho.testing.pytest_plugin`` (or ``pytest_plugins = ["memhoncho.testing.pytest_plugin"]``
in a conftest).

- ``config_dir``, ``data_dir``: fresh folders under the test's ``tmp_path``.
- ``workspace_id``: a fresh Honcho workspace id, so tests never share Honcho state.
- ``standin``: a running Honcho stand-in (``memhoncho.testing.HonchoStandIn``); its options come
  from the closest ``@pytest.mark.standin(...)`` marker, e.g. ``api_key="k", llm=True``.
- ``settings``: the settings a test's deployment is built with. This default writes none; a
  module overrides it to write its own (``memhoncho.testing.config.write_settings``) first.
- ``standin_settings``: ``standin_settings(**values)`` writes settings that point at the
  stand-in's workspace, with the stand-in's API key, plus ``values``: what most ``settings``
  overrides return.
- ``deployment``: a ``Deployment`` on ``config_dir`` and ``data_dir``, after ``settings``.
- ``host``: a ``Host`` on the deployment's folders, closed after the test.
- ``celery_process``: start real ``celery worker|beat`` processes on the deployment's folders
  (``memhoncho.testing.processes.CeleryProcess``); every one is stopped after the test
  (a warm shutdown of 5 s, then SIGKILL).

Nothing here changes the environment: a suite that wants its tests kept from the developer's
own memhoncho settings sets ``MEMHONCHO_CONFIG_DIR`` / ``MEMHONCHO_DATA_DIR`` itself.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from memhoncho.capture.host import Host
    from memhoncho.deployment import Deployment
    from memhoncho.testing.config import SettingsWriter
    from memhoncho.testing.processes import CeleryProcess
    from memhoncho.testing.standin import HonchoStandIn

STANDIN_MARKER = "standin"
TEARDOWN_STOP_S = 5.0  #: seconds a test's worker gets to stop after the test before SIGKILL


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{STANDIN_MARKER}(**options): options of the Honcho stand-in the `standin` fixture runs",
    )


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """An initialised data directory (``memhoncho init``): commands refuse one that is not."""
    from memhoncho.deployment import initialise

    path = tmp_path / "data"
    initialise(path)
    return path


@pytest.fixture
def workspace_id() -> str:
    return f"ws_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def standin(request: pytest.FixtureRequest) -> Iterator[HonchoStandIn]:
    from memhoncho.testing.standin import HonchoStandIn

    marker = request.node.get_closest_marker(STANDIN_MARKER)
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    with HonchoStandIn(**options) as running:
        yield running


@pytest.fixture
def settings() -> dict[str, Any]:
    """No settings file: every setting at its default. Override to write some."""
    return {}


@pytest.fixture
def honcho_timeout_s() -> float:
    """The Honcho client timeout for a ``settings`` fixture to write: a calm 10 s, so a loaded
    machine's slow answer is no fault a test did not plan. A test that plans a timeout (or
    waits for a fence) parametrizes it: ``@pytest.mark.parametrize("honcho_timeout_s", [0.5])``.
    (A 0.5 s timeout for a whole module failed CI's full-disk test: under load the session
    set-up took longer.)"""
    return 10.0


@pytest.fixture
def standin_settings(config_dir: Path, standin: HonchoStandIn, workspace_id: str) -> SettingsWriter:
    from memhoncho.testing.config import point_at_standin

    def write(**values: Any) -> dict[str, Any]:
        """The settings written; the stand-in needs a key of its marker for this."""
        if standin.api_key is None:
            raise ValueError("standin_settings needs @pytest.mark.standin(api_key=...)")
        return point_at_standin(config_dir, standin, workspace_id, standin.api_key, **values)

    return write


@pytest.fixture
def deployment(config_dir: Path, data_dir: Path, settings: dict[str, Any]) -> Deployment:
    from memhoncho.deployment import Deployment

    return Deployment(config_dir, data_dir)


@pytest.fixture
def host(deployment: Deployment) -> Iterator[Host]:
    from memhoncho.capture.host import Host

    with Host(deployment.config_dir, deployment.data_dir) as running:
        yield running


@pytest.fixture
def celery_process(deployment: Deployment) -> Iterator[Callable[..., CeleryProcess]]:
    """``celery_process("worker", queues=[...], concurrency=2, env={...})``: a started process
    on the deployment's folders (no API key in its environment: the settings' key is used)."""
    from memhoncho.testing.processes import CeleryProcess, memhoncho_env

    with contextlib.ExitStack() as running:

        def start(kind: str, *, env: dict[str, str] | None = None, **options: Any) -> CeleryProcess:
            process_env = memhoncho_env(
                config_dir=deployment.config_dir,
                data_dir=deployment.data_dir,
                api_key=None,
                extra=env,
            )
            process = CeleryProcess(kind, process_env, **options)
            # Stopped even when it never gets ready; after the test nothing waits on its
            # tasks: a short warm shutdown, then SIGKILL.
            running.callback(process.stop, TEARDOWN_STOP_S)
            return process.start()

        yield start
