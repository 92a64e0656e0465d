"""``ckptlog serve``: a local, read-only web viewer for a log's history, over HTTP.

One page (``eventlog/viewer/``: plain HTML, JS and CSS shipped in the package, no CDN, no
build step) over a small JSON API (eventlog.viewer.api), served by the standard library's
``ThreadingHTTPServer``. Nothing here imports the command line: ``ckptlog serve`` calls
:func:`add_arguments` and :func:`run`.

Invariants:
- GET and HEAD only: the viewer is read-only.
- Requests whose ``Host`` header is not the bound address are refused (DNS rebinding); with a
  token, every request must carry it (``?token=`` once, then a cookie). Binding a non-loopback
  address requires a token.
- The page renders every id and value as text (``textContent``, never HTML), and the
  Content-Security-Policy forbids inline scripts; every answer is ``no-store``.
"""

from __future__ import annotations

import argparse
import hmac
import http.server
import importlib.resources
import ipaddress
import json
import sys
import threading
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from typing import IO, Any, Final

from eventlog import forensics as fx
from eventlog.errors import CheckpointError
from eventlog.read.opening import chain_key_options
from eventlog.read.values import json_bytes, package_version
from eventlog.viewer.api import BINS_MAX, PAGE_MAX, BadRequest, Viewer

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
TOKEN_COOKIE: Final = "ckptlog_token"
STATIC: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class ServeError(CheckpointError):
    """``ckptlog serve`` cannot start as asked (bad host, a public bind without a token)."""


# -- HTTP -----------------------------------------------------------------------------------------


class _Args:
    """Query parameters, checked: a bad one is a 400 naming it."""

    def __init__(self, query: str) -> None:
        self.q = urllib.parse.parse_qs(query, keep_blank_values=True)

    def text(self, name: str, default: str | None = None) -> str:
        got = self.q.get(name)
        if got:
            return got[0]
        if default is None:
            raise BadRequest(f"parameter {name!r} is required")
        return default

    def number(
        self, name: str, default: int | None = None, lo: int = 0, hi: int | None = None
    ) -> int:
        text = self.text(name, None if default is None else str(default))
        try:
            value = int(text)
        except ValueError:
            raise BadRequest(f"parameter {name!r} must be an integer, got {text!r}") from None
        if value < lo:
            raise BadRequest(f"parameter {name!r} must be >= {lo}, got {value}")
        return value if hi is None else min(value, hi)

    def path(self, name: str) -> list[Any]:
        text = self.text(name, "[]")
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, list):
            raise BadRequest(f"parameter {name!r} must be a JSON list of keys, got {text!r}")
        return value


def _routes(v: Viewer) -> dict[str, Callable[[_Args], Any]]:
    def page(a: _Args) -> tuple[int, int]:
        return a.number("offset", 0), a.number("limit", 100, lo=1, hi=PAGE_MAX)

    return {
        "/api/info": lambda a: {
            "path": v.path,
            "version": package_version(),
            "problems": v.problems,
        },
        "/api/changes": lambda a: v.changes(),
        "/api/invocations": lambda a: v.invocations(
            a.text("q", ""), a.text("status", ""), a.text("family", ""), *page(a)
        ),
        "/api/timeline": lambda a: v.timeline(
            a.text("id"),
            a.number("lo", 1),
            a.number("hi", 0),
            a.number("bins", 400, lo=1, hi=BINS_MAX),
        ),
        "/api/record": lambda a: v.record(a.text("id"), a.number("seq")),
        "/api/value": lambda a: v.value(
            a.text("id"),
            a.number("seq"),
            a.text("what", "state"),
            a.path("path"),
            a.number("offset", 0),
        ),
        "/api/instances": lambda a: v.instances(
            a.text("id"),
            a.number("seq"),
            a.number("fan", 0),
            a.number("lo", 0),
            a.number("hi", 0),
            a.number("bins", 1000, lo=1, hi=BINS_MAX),
        ),
        "/api/instance": lambda a: v.instance(
            a.text("id"), a.number("seq"), a.number("fan", 0), a.number("index")
        ),
        "/api/failures": lambda a: v.failures(a.text("id"), a.number("fan", 0), *page(a)),
        "/api/diff": lambda a: v.diff(a.text("id"), a.number("a"), a.number("b"), *page(a)),
        "/api/frames": lambda a: v.frames(a.text("id"), *page(a)),
        "/api/steps": lambda a: v.steps(a.text("id"), *page(a)),
        "/api/langgraph": lambda a: v.langgraph(a.text("thread"), a.text("ns", ""), *page(a)),
        "/api/techrevati": lambda a: v.techrevati(a.text("thread"), *page(a)),
        "/api/apflow": lambda a: v.apflow(a.text("task"), *page(a)),
        "/api/stats": lambda a: v.stats(),
        "/api/verify": lambda a: v.verify(a.text("start", "0") == "1"),
    }


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """``Host`` header values accepted for a server bound to ``host:port`` (``None``: any,
    for a wildcard bind, which requires a token instead)."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {host}
    try:
        if ipaddress.ip_address(host).is_loopback:
            names |= {"localhost", "127.0.0.1", "::1"}
    except ValueError:
        if host == "localhost":
            names |= {"127.0.0.1", "::1"}
    out = set()
    for name in names:
        shown = f"[{name}]" if ":" in name else name
        out |= {f"{shown}:{port}".lower()}
        if port == 80:
            out.add(shown.lower())
    return frozenset(out)


class ViewerServer(http.server.ThreadingHTTPServer):
    """The HTTP server of :class:`Viewer`; ``port`` 0 picks a free one (see ``url``)."""

    daemon_threads = True

    def __init__(self, viewer: Viewer, host: str, port: int, token: str | None) -> None:
        self.viewer = viewer
        self.token = token
        self.routes = _routes(viewer)
        if ":" in host:
            self.address_family = __import__("socket").AF_INET6
        super().__init__((host, port), _Handler)
        self.host = host
        self.port = int(self.server_address[1])
        self.hosts = allowed_hosts(host, self.port)

    @property
    def url(self) -> str:
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        shown = f"[{shown}]" if ":" in shown else shown
        return f"http://{shown}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()
        return thread

    def server_close(self) -> None:
        super().server_close()
        self.viewer.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the terminal shows the URL and warnings only

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def do_GET(self) -> None:
        self._handle(head=False)

    def _refuse_method(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "the viewer is read-only: GET only"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_method

    def _handle(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        srv = self.server
        host = (self.headers.get("Host") or "").strip().lower()
        if srv.hosts is not None and host not in srv.hosts:
            self._send(
                HTTPStatus.FORBIDDEN,
                {"error": f"Host {host!r} is not the address this viewer is bound to; open "
                          f"{srv.url}"},
            )  # fmt: skip
            return
        args = _Args(url.query)
        cookie_token = None
        if srv.token is not None:
            given = args.q.get("token", [None])[0]
            cookies = self.headers.get("Cookie") or ""
            for part in cookies.split(";"):
                name, _, value = part.strip().partition("=")
                if name == TOKEN_COOKIE:
                    cookie_token = value
            ok = any(
                t is not None and hmac.compare_digest(t.encode(), srv.token.encode())
                for t in (given, cookie_token)
            )
            if not ok:
                message = "this viewer needs its token: open the URL it printed"
                self._send(HTTPStatus.UNAUTHORIZED, {"error": message})
                return
            # A token given in the URL is set as a cookie, so the page's requests carry it.
            fresh = given is not None and cookie_token != srv.token
            cookie_token = srv.token if fresh else None
        route = url.path
        if route in ("/", "/index.html"):
            route = "/static/index.html"
        if route.startswith("/static/"):
            name = route[len("/static/") :]
            if name not in STATIC:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no such file {name!r}"})
                return
            body = (importlib.resources.files("eventlog.viewer") / name).read_bytes()
            self._reply(HTTPStatus.OK, STATIC[name], body, head, cookie_token)
            return
        fn = srv.routes.get(route)
        if fn is None:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no endpoint {route!r}"})
            return
        try:
            with srv.viewer.session():
                result = fn(args)
        except (fx.InvalidArgument, fx.NoSuchInvocation) as e:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(e)}, head)
            return
        except CheckpointError as e:
            self._send(HTTPStatus.UNPROCESSABLE_ENTITY, {"error": f"{type(e).__name__}: {e}"})
            return
        except Exception as e:  # noqa: BLE001 - the page shows it; the server carries on
            message = f"internal error ({type(e).__name__}: {e}); please report it"
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": message})
            return
        self._send(HTTPStatus.OK, result, head, cookie_token)

    def _send(self, status: int, obj: Any, head: bool = False, cookie: str | None = None) -> None:
        self._reply(status, "application/json", json_bytes(obj), head, cookie)

    def _reply(
        self, status: int, ctype: str, body: bytes, head: bool, cookie: str | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        if cookie is not None:
            self.send_header(
                "Set-Cookie", f"{TOKEN_COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict"
            )
        self.end_headers()
        if not head:
            self.wfile.write(body)


# -- starting it ----------------------------------------------------------------------------------


def make_server(
    path: str,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    warn: Callable[[str], None] | None = None,
    **options: Any,
) -> ViewerServer:
    """A viewer of the log at ``path`` bound to ``host:port`` (not yet serving: call
    ``serve_forever`` or ``serve_in_thread``). A non-loopback ``host`` needs a ``token``."""
    if token is not None and (not token or not token.isascii() or not token.isprintable()):
        raise ServeError("--token must be non-empty printable ASCII; pick a long random one")
    if not _loopback(host):
        if token is None:
            raise ServeError(
                f"--host {host} serves the log to other machines: give --token SECRET as well "
                "(the page then needs ?token=SECRET), or keep the default --host 127.0.0.1"
            )
        if warn is not None:
            warn(
                f"serving on {host}: anyone who can reach port {port} of this machine and knows "
                "the token can read the whole log"
            )
    viewer = Viewer(path, **options)
    try:
        return ViewerServer(viewer, host, port, token)
    except BaseException:
        viewer.close()
        raise


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``ckptlog serve``'s own options (PATH and the common ones come from the CLI)."""
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any")
    p.add_argument("--host", default=DEFAULT_HOST, help="the address to bind (default 127.0.0.1)")
    p.add_argument(
        "--token",
        metavar="SECRET",
        help="require ?token=SECRET (then a cookie); needed for a non-loopback --host",
    )


def run(
    args: argparse.Namespace,
    out: IO[str],
    err: IO[str],
    *,
    ready: Callable[[str], None] | None = None,
) -> int:
    """Serve until interrupted (what ``ckptlog serve`` runs)."""
    options = chain_key_options(getattr(args, "chain_key_file", None))

    def warn(message: str) -> None:
        err.write(f"ckptlog: warning: {message}\n")
        err.flush()

    server = make_server(
        args.path, host=args.host, port=args.port, token=args.token, warn=warn, **options
    )
    for p in server.viewer.problems:
        warn(str(p.get("detail", p)))
    out.write(f"ckptlog: serving {args.path} read-only at {server.url}  (Ctrl-C stops)\n")
    out.flush()
    if ready is not None:
        ready(server.url)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m eventlog.viewer PATH [--host H] [--port N] [--token T]``."""
    p = argparse.ArgumentParser(
        prog="python -m eventlog.viewer", description=__doc__.split("\n")[0]
    )
    p.add_argument("path", metavar="PATH")
    p.add_argument("--chain-key-file", metavar="FILE")
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        return 130
    except (CheckpointError, OSError) as e:
        sys.stderr.write(f"ckptlog: error: {e}\n")
        return 2
