"""``list_phones()``: the Android devices adb can see (for ``collabui devices``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from collabui.errors import ConfigError, DeviceError

__all__ = ["PhoneInfo", "list_phones"]


@dataclass(frozen=True)
class PhoneInfo:
    """One device known to adb.

    Attributes:
        serial: adb serial, what ``--serial`` / ``ANDROID_SERIAL`` takes.
        model: product model (e.g. "Pixel 7"), "" when adb does not report it.
        state: adb state: ``device`` (ready), ``unauthorized`` (accept the USB debugging prompt
            on the phone), ``offline``, ...
    """

    serial: str
    model: str
    state: str

    @property
    def ready(self) -> bool:
        """Whether the phone can be driven now (adb state ``device``)."""
        return self.state == "device"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _client(host: str | None, port: int | None) -> Any:
    try:
        import adbutils
    except ImportError:
        raise ConfigError("adbutils is not installed; run `pip install "
                          "'collabui-agents[android]'`") from None
    if host is None and port is None:
        return adbutils.adb
    return adbutils.AdbClient(host=host or "127.0.0.1", port=port or 5037)


def list_phones(*, host: str | None = None, port: int | None = None,
                client: Any = None) -> list[PhoneInfo]:
    """Every device the adb server lists (``adb devices -l``), ready or not, sorted by serial.

    Like ``adb devices`` this starts the local adb server if none runs (adbutils ships an adb
    binary). Reads only what adb already knows: no command runs on the phones.

    Args:
        host, port: the adb server (default 127.0.0.1:5037, or ``$ANDROID_ADB_SERVER_PORT``
            as adbutils reads it).
        client: an ``adbutils.AdbClient``-like object (tests).

    Raises:
        ConfigError: adbutils (the ``[android]`` extra) is not installed.
        DeviceError: the adb server cannot be reached or started.
    """
    adb = client if client is not None else _client(host, port)
    try:
        infos = adb.list(extended=True)
    except Exception as exc:  # noqa: BLE001 - any failure means adb is unusable here
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise DeviceError(f"adb is not available ({first}); install Android platform-tools or "
                          "check that `adb devices` works, then retry") from None
    phones = [PhoneInfo(serial=str(info.serial), state=str(info.state),
                        model=str((getattr(info, "tags", None) or {}).get("model", ""))
                        .replace("_", " "))
              for info in infos]
    return sorted(phones, key=lambda p: p.serial)
