"""App name -> package resolution for ``open_app`` on Android, and the allowlist check.

Android has no cheap way to read app labels over adb (``pm`` lists packages only), so a name
is resolved, in order: an installed package name given as is; the user's aliases, then a table
of common apps (first installed candidate wins); the installed launchable package whose last
name segment, then any segment, then any substring equals the name without spaces.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["KNOWN_APPS", "normalize_app_name", "resolve_app", "allowed_packages", "parse_launchable"]

#: Common app names -> candidate packages (AOSP, Google and the AndroidWorld apps).
KNOWN_APPS: dict[str, tuple[str, ...]] = {
    "settings": ("com.android.settings",),
    "chrome": ("com.android.chrome",),
    "camera": ("com.android.camera2", "com.google.android.GoogleCamera", "com.android.camera"),
    "clock": ("com.google.android.deskclock", "com.android.deskclock"),
    "contacts": ("com.google.android.contacts", "com.android.contacts"),
    "phone": ("com.google.android.dialer", "com.android.dialer"),
    "dialer": ("com.google.android.dialer", "com.android.dialer"),
    "messages": ("com.google.android.apps.messaging", "com.android.messaging"),
    "gmail": ("com.google.android.gm",),
    "maps": ("com.google.android.apps.maps",),
    "youtube": ("com.google.android.youtube",),
    "play store": ("com.android.vending",),
    "photos": ("com.google.android.apps.photos",),
    "gallery": ("com.android.gallery3d", "com.google.android.apps.photos"),
    "calendar": ("com.google.android.calendar", "com.android.calendar",
                 "com.simplemobiletools.calendar.pro"),
    "files": ("com.google.android.documentsui", "com.android.documentsui"),
    "calculator": ("com.google.android.calculator", "com.android.calculator2"),
    "google": ("com.google.android.googlequicksearchbox",),
    "markor": ("net.gsantner.markor",),
    "simple calendar pro": ("com.simplemobiletools.calendar.pro",),
    "simple sms messenger": ("com.simplemobiletools.smsmessenger",),
    "simple gallery pro": ("com.simplemobiletools.gallery.pro",),
    "audio recorder": ("com.dimowner.audiorecorder",),
    "broccoli": ("com.flauschcode.broccoli",),
    "expense": ("com.arduia.expense",),
    "pro expense": ("com.arduia.expense",),
    "osmand": ("net.osmand",),
    "retro music": ("code.name.monkey.retromusic",),
    "tasks": ("org.tasks",),
    "vlc": ("org.videolan.vlc",),
    "joplin": ("net.cozic.joplin",),
    "opentracks": ("de.dennisguse.opentracks",),
}

_PACKAGE = re.compile(r"\b([A-Za-z][\w]*(?:\.[\w]+)+)/[\w.$]+")


def normalize_app_name(name: str) -> str:
    """Lower case, punctuation to spaces, spaces collapsed: ``"Play-Store "`` -> ``"play store"``."""
    return " ".join(re.sub(r"[^\w]+", " ", name.lower()).split())


def parse_launchable(output: str) -> list[str]:
    """Packages in ``cmd package query-activities`` output (``pkg/activity`` tokens)."""
    return list(dict.fromkeys(m.group(1) for m in _PACKAGE.finditer(output)))


def _by_segments(compact: str, packages: Sequence[str]) -> str | None:
    def segments(package: str) -> list[str]:
        return [s.lower() for s in package.split(".")]

    tests = (lambda p: segments(p)[-1] == compact,
             lambda p: compact in segments(p),
             lambda p: compact in p.lower().replace(".", ""))
    for test in tests:
        found = sorted((p for p in packages if test(p)), key=len)
        if found:
            return found[0]  # the shortest: com.android.settings before ...providers.settings
    return None


def resolve_app(name: str, installed: Iterable[str], launchable: Iterable[str] = (),
                aliases: Mapping[str, str] | None = None) -> str | None:
    """The package to launch for app ``name``, or None when nothing installed matches.

    Args:
        name: what the agents wrote (an app label like "Settings", or a package name).
        installed: every installed package (``pm list packages``).
        launchable: packages with a launcher activity (preferred by the fuzzy steps).
        aliases: user names -> packages, tried before the built-in table.
    """
    installed_set = set(installed)
    if name.strip() in installed_set:
        return name.strip()
    key = normalize_app_name(name)
    if not key:
        return None
    user = {normalize_app_name(k): v for k, v in (aliases or {}).items()}
    candidates = [user[key]] if key in user else []
    candidates += list(KNOWN_APPS.get(key, ()))
    for package in candidates:
        if package in installed_set:
            return package
    compact = key.replace(" ", "")
    pool = [p for p in launchable if p in installed_set] or sorted(installed_set)
    return _by_segments(compact, pool)


def allowed_packages(allowlist: Iterable[str], installed: Iterable[str],
                     launchable: Iterable[str] = (),
                     aliases: Mapping[str, str] | None = None) -> set[str]:
    """The packages an allowlist admits: each entry is an app name or a package name, resolved
    like ``open_app`` resolves names (so "Settings" admits ``com.android.settings``)."""
    installed, launchable = list(installed), list(launchable)
    out = set()
    for entry in allowlist:
        out.add(entry.strip())
        package = resolve_app(entry, installed, launchable, aliases)
        if package:
            out.add(package)
    return out
