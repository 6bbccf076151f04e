"""The browser's navigation guard: which pages a BrowserDevice may open.

Only ``http``/``https`` pages on allowed hosts load (``about:blank``, the empty page every tab
starts on, too); ``file:``, ``data:``, ``javascript:``, ``chrome:``, ``view-source:`` and every
other scheme are refused. The guard is installed with Playwright's context-level request routing
(``BrowserContext.route``), so it sees the navigation requests of every page, popup, new tab and
iframe of the device. A navigation it refuses is answered with an empty ``204 No Content``
response, which a browser treats as "stay where you are": the page the agents were on stays, and
a blocked popup stays blank. Server redirects are followed by the guard itself (Playwright calls
a route handler only for the first URL of a redirect chain), so a redirect to another site is
refused before the browser sees it.

Routing never sees what Chromium loads without a request: ``data:`` and ``blob:`` documents a
page script puts in an iframe, or opens in its tab or a popup (``UNROUTED_SCHEMES``). The device
checks every frame's URL as it commits (``refuse_commit``) and undoes those at once: an iframe
is pointed at ``about:blank``, a tab goes back (a popup with nowhere to go back to is closed).
Their content is never observed; a script in it may have run for that moment, and whatever it
tried to open went through the guard like any other navigation. ``about:srcdoc`` frames are
the page's own markup, and their navigations are routed as any frame's.

Hosts: an entry ``example.org`` allows ``example.org`` and every subdomain of it
(``www.example.org``, ``a.b.example.org``); an IP address allows that address (any port);
``"*"`` allows every host (schemes are still checked). ``origins`` allow one exact origin
(scheme, host and port): MiniWoB++ allows its own local server and nothing else.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urljoin, urlsplit

from collabui.errors import ConfigError

__all__ = ["NavigationGuard", "BlockedNavigation", "UNROUTED_SCHEMES", "check_domains", "site_of"]

#: Schemes a page may be loaded from.
WEB_SCHEMES = ("http", "https")
#: Non-web URLs a tab may show: the blank page tabs start on, an iframe's inline document.
_INERT_PAGES = ("about:blank", "about:srcdoc")
_HOST = re.compile(r"^(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$")
_REDIRECTS = (301, 302, 303, 307, 308)
#: Schemes Chromium loads without a network request, so request routing never sees them.
UNROUTED_SCHEMES = ("data", "blob", "filesystem")

BlockedNavigation = dict[str, str]


def check_domains(domains: Iterable[str]) -> tuple[str, ...]:
    """``domains`` as normalised host names (lower case, no ``*.`` prefix), or ConfigError."""
    if isinstance(domains, str):
        raise ConfigError(f"allowed_domains must be a list of host names, got the string "
                          f"{domains!r}; write [{domains!r}]")
    out: list[str] = []
    for entry in domains:
        host = entry.strip().lower().rstrip(".") if isinstance(entry, str) else entry
        if host == "*":
            out.append(host)
            continue
        if not isinstance(host, str) or not (_is_ip(host) or _HOST.match(host)):
            raise ConfigError(f"allowed domain {entry!r} is not a host name; give a bare host "
                              "like 'example.org' (no scheme, port or path), or '*' for any site")
        out.append(host.removeprefix("*."))
    return tuple(dict.fromkeys(out))


def site_of(url: str) -> str:
    """The host ``url``'s site is allowed under: its host, a leading ``www.`` dropped.

    Not the registrable domain (no public-suffix list is consulted): the site of
    ``https://shop.example.org`` is ``shop.example.org`` and covers its subdomains only.
    """
    host = (urlsplit(url).hostname or "").lower()
    return host.removeprefix("www.") if host.count(".") >= 2 else host


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


class NavigationGuard:
    """Decides which URLs may load and blocks the rest on a Playwright browser context.

    Args:
        domains: allowed hosts (see the module docstring); ``("*",)`` allows every web host.
        origins: allowed exact origins, e.g. ``("http://127.0.0.1:8123",)``.
    """

    def __init__(self, domains: Iterable[str] = (), origins: Iterable[str] = ()) -> None:
        self.domains = check_domains(domains)
        self.origins = tuple(_origin(o) for o in origins)
        self.blocked: list[BlockedNavigation] = []
        #: Navigation requests checked so far (allowed or not).
        self.navigations = 0
        #: Of the allowed ones, those that open a page not made yet (a popup: window.open, target=_blank).
        self.new_pages = 0
        #: Requests that would open a page but were refused or unreachable: no content for that popup.
        self.blank_pages = 0
        self._in_flight = 0

    def describe(self) -> str:
        """The allowed sites, for messages."""
        parts = [*self.domains, *self.origins]
        return ", ".join(parts) if parts else "none"

    def refusal(self, url: str) -> str | None:
        """Why ``url`` may not load, or None when it may."""
        if url in _INERT_PAGES:
            return None
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme not in WEB_SCHEMES:
            return (f"{scheme or 'this'}: URLs are never opened; only http(s) pages on "
                    f"{self.describe()}")
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if "*" in self.domains or _origin(url) in self.origins:
            return None
        for domain in self.domains:
            if host == domain or (not _is_ip(domain) and host.endswith("." + domain)):
                return None
        return f"{host or url} is not an allowed site (allowed: {self.describe()})"

    def refuse_commit(self, url: str, how: str) -> bool:
        """True (and the block recorded) when a frame that just committed ``url`` must be
        undone: a refused URL of a scheme routing never saw. Other URLs went through
        ``route`` already (an aborted one commits Chromium's error page, which stays)."""
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        reason = self.refusal(url) if scheme in UNROUTED_SCHEMES else None
        if reason:
            self.navigations += 1
            self._block(url, reason, how)
        return reason is not None

    def drain(self) -> list[BlockedNavigation]:
        """The navigations blocked since the last call (oldest first), forgotten here."""
        blocked, self.blocked = self.blocked, []
        return blocked

    @property
    def busy(self) -> bool:
        """True while a navigation request is being checked (a redirect chain followed)."""
        return self._in_flight > 0

    def _block(self, url: str, reason: str, how: str) -> None:
        self.blocked.append({"url": url, "reason": reason, "via": how})

    async def route(self, route: Any, *, timeout_s: float = 30.0) -> None:
        """Playwright route handler: navigation requests are checked, the rest pass.

        ``timeout_s`` bounds the guard's own fetch of the page: a navigation's budget, not the
        context's default (the element-action timeout, far too short for a page load on a
        loaded machine)."""
        request = route.request
        if not request.is_navigation_request():
            await route.continue_()
            return
        self._in_flight += 1
        self.navigations += 1
        try:
            await self._navigate(route, request.url, timeout_s, opens_page=_opens_a_page(request))
        finally:
            self._in_flight -= 1

    async def _navigate(self, route: Any, url: str, timeout_s: float, *, opens_page: bool = False) -> None:
        from playwright.async_api import Error as PlaywrightError

        reason = self.refusal(url)
        if reason:
            self._block(url, reason, "navigation")
            self.blank_pages += opens_page
            await route.fulfill(status=204)
            return
        try:
            # Fetched here without following redirects, so every hop is checked.
            response = await route.fetch(max_redirects=0, timeout=timeout_s * 1000)
        except PlaywrightError:
            self.blank_pages += opens_page  # a popup's wait (the device's settle) ends here too
            await route.abort()  # unreachable: the browser reports it as it would have
            return
        location = response.headers.get("location")
        if response.status in _REDIRECTS and location:
            target = urljoin(url, location)
            reason = self.refusal(target)
            if reason:
                self._block(target, reason, f"redirect from {url}")
                self.blank_pages += opens_page
                await route.fulfill(status=204)
                return
        # Only a page that gets content is announced soon after (a refused popup stays blank).
        self.new_pages += opens_page
        await route.fulfill(response=response)


def _opens_a_page(request: Any) -> bool:
    """True for a navigation whose frame does not exist yet: a popup's first page, whose
    ``page`` event comes only after this request is answered (Playwright raises on its frame)."""
    from playwright.async_api import Error as PlaywrightError

    try:
        request.frame  # noqa: B018 - the attribute raises for a page not made yet
    except PlaywrightError:
        return True
    return False
