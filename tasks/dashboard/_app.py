"""The dashboard's web application (tornado): its pages, their JSON, basic auth, the server.

tornado, because hoptune already depends on it through Flower: the dashboard
adds no package to an install, and its one event loop serves the pages while
the study database is read in a thread pool, so a slow query never holds up
another request. Each page is a template with empty sections that
``static/dashboard.js`` fills from the page's JSON endpoint and polls again
every ``POLL_SECONDS``: the page follows a running study without a reload.
Everything the browser loads ships in the package (no CDN): a cluster without
internet shows the same pages.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import tornado.web
from tornado.ioloop import IOLoop

from hoptune.core import ConfigError, Settings, Store
from hoptune.tasks.dashboard._auth import Credentials, authorized
from hoptune.tasks.dashboard._cluster import RecentHops, TrialNames, cluster_page
from hoptune.tasks.dashboard._night import FinishedTrials, latest_studies, night
from hoptune.tasks.dashboard._sampler import Sampler
from hoptune.tasks.dashboard._study import study_page, trial_page
from hoptune.tasks.plan import ForecastCache, forecast
from hoptune.tuner import StudyDB, StudyRow, utcnow

__all__ = ["POLL_SECONDS", "Dashboard", "make_app", "serve"]

HERE = Path(__file__).resolve().parent
POLL_SECONDS = 2.0
GANTT_SECONDS = 300.0  # the cluster page's Gantt: the last five minutes
FORECAST_SECONDS = 30.0


def _clean(value: Any) -> Any:
    """JSON-able: times as ISO text, non-finite numbers as null (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class Dashboard:
    """What the pages read: the study database (read only), the sampler, the forecast."""

    def __init__(self, settings: Settings, *, app: Any = None, window: float = GANTT_SECONDS,
                 sample_every: float = 3.0) -> None:
        self.settings, self.window = settings, window
        self.db = StudyDB(settings.database_url, create=False)
        self.store = Store(settings.store_url)
        self.sampler = Sampler(settings, self.db, self.store, app, every=sample_every)
        deadline = settings.nightly_deadline
        self.forecasts = ForecastCache(lambda: forecast(self.db, deadline, utcnow()),
                                       FORECAST_SECONDS)
        self.trial_names = TrialNames(self.db)
        self.recent_hops = RecentHops(self.db, window)
        self.finished_trials = FinishedTrials(self.db)

    def start(self) -> Dashboard:
        """Take the first sample and start the first forecast; read what the pages keep
        (finished studies' trials, the window's hops), so the first request is as quick as
        the next."""
        self.sampler.start()
        self.forecasts.latest()
        self.night()
        self.cluster()
        return self

    def stop(self) -> None:
        self.sampler.stop()
        self.db.dispose()

    # what each endpoint answers (None: not found) --------------------------------

    def night(self) -> dict[str, Any]:
        return night(self.db, self.finished_trials, self.sampler.latest(),
                     self.forecasts.latest(), self.settings.nightly_deadline, utcnow())

    def _study(self, study_id: int) -> StudyRow | None:
        return next((s for s in self.db.studies() if s.id == study_id), None)

    def study(self, study_id: int) -> dict[str, Any] | None:
        study = self._study(study_id)
        return None if study is None else study_page(self.db, study)

    def region(self, region: str) -> dict[str, Any] | None:
        study = latest_studies(self.db).get(region)
        return None if study is None else study_page(self.db, study)

    def trial(self, study_id: int, number: int) -> dict[str, Any] | None:
        study = self._study(study_id)
        return None if study is None else trial_page(self.db, study, number)

    def cluster(self) -> dict[str, Any]:
        return cluster_page(self.db, self.sampler.latest(), self.trial_names, self.recent_hops,
                            utcnow())

    def registry(self) -> dict[str, Any]:
        sample = self.sampler.latest()
        return {"regions": [{"region": name, **held}
                            for name, held in sorted(sample.registry.items())]}

    def has_study(self, study_id: int) -> bool:
        return self._study(study_id) is not None

    def region_place(self, region: str) -> str | None:
        """Where a region's page is: its latest study, else its registry entry, else None."""
        if region in latest_studies(self.db):
            return "study"
        return "registry" if region in self.sampler.latest().registry else None


REALM = 'Basic realm="hoptune dashboard"'


def ask_credentials(handler: tornado.web.RequestHandler) -> None:
    """401, with the challenge a browser answers, unless the request carries the credentials."""
    expected = handler.credentials  # type: ignore[attr-defined]
    if expected is not None and not authorized(handler.request.headers.get("Authorization"),
                                               expected):
        raise tornado.web.HTTPError(401, reason="Unauthorized")


class _Handler(tornado.web.RequestHandler):
    """Basic auth where credentials are set, and one-line error pages."""

    def initialize(self, dashboard: Dashboard, credentials: Credentials | None) -> None:
        self.dashboard, self.credentials = dashboard, credentials

    def prepare(self) -> None:
        ask_credentials(self)

    def set_default_headers(self) -> None:
        self.set_header("Cache-Control", "no-store")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 401:  # set here: an error's response starts with cleared headers
            self.set_header("WWW-Authenticate", REALM)
        exc = kwargs.get("exc_info", (None, None))[1]
        message = getattr(exc, "log_message", None) or self._reason
        if self.request.path.startswith("/api/"):
            self.finish({"error": message, "status": status_code})
        else:
            self.set_header("Content-Type", "text/html; charset=UTF-8")
            self.finish(self.render_string("error.html", status=status_code, message=message))

    def not_found(self, what: str) -> None:
        raise tornado.web.HTTPError(404, what)


class NotFound(_Handler):
    """Any other path: 404 (after the credentials, as every page)."""

    def get(self, *args: str) -> None:
        self.not_found(f"no page {self.request.path}")


class _Page(_Handler):
    """A page: the template with its sections, which the script fills from ``api``."""

    def page(self, name: str, title: str, api: str, **extra: Any) -> None:
        self.render("page.html", page=name, title=title, api=api, poll=POLL_SECONDS, **extra)


class NightPage(_Page):
    def get(self) -> None:
        self.page("night", "The night", "/api/night")


class RegionPage(_Page):
    async def get(self, region: str) -> None:
        place = await IOLoop.current().run_in_executor(None, self.dashboard.region_place, region)
        if place is None:
            self.not_found(f"no region {region!r}: it has no study and no champion")
        if place == "registry":
            self.redirect(f"/registry#{region}")
            return
        self.page("study", f"Region {region}", f"/api/region/{region}", region=region)


class StudyPage(_Page):
    async def get(self, study_id: str) -> None:
        known = await IOLoop.current().run_in_executor(None, self.dashboard.has_study,
                                                       int(study_id))
        if not known:
            self.not_found(f"no study {study_id}")
        self.page("study", f"Study {study_id}", f"/api/study/{study_id}")


class ClusterPage(_Page):
    def get(self) -> None:
        self.page("cluster", "The cluster", "/api/cluster")


class RegistryPage(_Page):
    def get(self) -> None:
        self.page("registry", "The registry", "/api/registry")


class Api(_Handler):
    """One JSON endpoint: ``read(dashboard, *args)`` in the thread pool; None answers 404."""

    def initialize(self, dashboard: Dashboard, credentials: Credentials | None,  # type: ignore[override]
                   read: Callable[..., dict[str, Any] | None] | None = None,
                   what: str = "") -> None:
        super().initialize(dashboard, credentials)
        self.read, self.what = read, what

    async def get(self, *args: str) -> None:
        assert self.read is not None
        values = [int(a) if a.isdigit() else a for a in args]
        data = await IOLoop.current().run_in_executor(None, self.read, self.dashboard, *values)
        if data is None:
            self.not_found(self.what.format(*args))
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(_clean(data), separators=(",", ":")))


class Static(tornado.web.StaticFileHandler):
    """The script and the style sheet, behind the same basic auth as the pages."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 401:
            self.set_header("WWW-Authenticate", REALM)
        super().write_error(status_code, **kwargs)

    def initialize(self, path: str, default_filename: str | None = None,  # type: ignore[override]
                   credentials: Credentials | None = None) -> None:
        super().initialize(path, default_filename)
        self.credentials = credentials

    def prepare(self) -> None:
        ask_credentials(self)


REGION = r"([a-z0-9_-]+)"


def make_app(dashboard: Dashboard, credentials: Credentials | None) -> tornado.web.Application:
    """The application: pages, their JSON, the static files."""
    own = {"dashboard": dashboard, "credentials": credentials}

    def api(pattern: str, read: Callable[..., Any], what: str = "") -> tuple[str, type, dict]:
        return (pattern, Api, {**own, "read": read, "what": what})

    return tornado.web.Application([
        (r"/", NightPage, own),
        (rf"/region/{REGION}", RegionPage, own),
        (r"/study/(\d+)", StudyPage, own),
        (r"/cluster", ClusterPage, own),
        (r"/registry", RegistryPage, own),
        api(r"/api/night", Dashboard.night),
        api(rf"/api/region/{REGION}", Dashboard.region, "no study of region {0!r}"),
        api(r"/api/study/(\d+)", Dashboard.study, "no study {0}"),
        api(r"/api/study/(\d+)/trial/(\d+)", Dashboard.trial, "no trial {1} in study {0}"),
        api(r"/api/cluster", Dashboard.cluster),
        api(r"/api/registry", Dashboard.registry),
    ], template_path=str(HERE / "templates"), static_path=str(HERE / "static"),
        static_handler_class=Static, static_handler_args={"credentials": credentials},
        default_handler_class=NotFound,
        default_handler_args=own, compress_response=True)


def serve(settings: Settings, host: str, port: int, credentials: Credentials | None,
          announce: Callable[[str], None] = print) -> None:
    """Serve the dashboard until SIGTERM or Ctrl-C; ``announce`` gets its URL once it listens.

    Port 0 takes any free port (the URL announced names it).
    """
    from tornado.httpserver import HTTPServer
    from tornado.netutil import bind_sockets

    from hoptune.tasks import app as celery_app

    try:
        sockets = bind_sockets(port, address=host)
    except OSError as exc:
        raise ConfigError(f"dashboard: cannot listen on {host}:{port}: "
                          f"{exc.strerror or exc}") from None
    dashboard = Dashboard(settings, app=celery_app).start()

    async def run() -> None:
        server = HTTPServer(make_app(dashboard, credentials), xheaders=False)
        server.add_sockets(sockets)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        shown = f"[{host}]" if ":" in host else host
        announce(f"dashboard on http://{shown}:{sockets[0].getsockname()[1]}/ "
                 f"({'HTTP basic auth' if credentials else 'no auth'}); Ctrl-C stops")
        await stop.wait()
        server.stop()

    try:
        asyncio.run(run())
    finally:
        dashboard.stop()
