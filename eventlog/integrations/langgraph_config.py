"""The config and argument checks of :class:`eventlog.integrations.langgraph.CkptlogSaver`'s
read and write sides: the ids a ``RunnableConfig`` names, the config a read returns, and the
checks of ``put``'s versions (moved out of ``langgraph_reads.py``, which stays under ~800
lines).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from eventlog.errors import InvalidCheckpoint, InvalidConfig
from eventlog.validate import _INT_END, _INT_MIN, is_int


def _configurable(config: Any, what: str) -> Any:
    """``config['configurable']`` (``{}`` when absent); :class:`InvalidConfig` for a config
    that is not a mapping, or whose ``configurable`` is not one."""
    if config is None:
        return {}
    if type(config) is dict:  # the common case, without the ABC checks below
        conf = config.get("configurable")
        if conf is None or type(conf) is dict:
            return conf or {}
    conf = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(config, Mapping) or not (conf is None or isinstance(conf, Mapping)):
        raise InvalidConfig(
            f"{what}: config must be a dict like {{'configurable': {{'thread_id': ...}}}}, "
            f"found {type(config).__name__} {str(config)[:80]!r}; pass a RunnableConfig"
        )
    return conf or {}


def _ids(config: RunnableConfig | None, what: str) -> tuple[str, str, str | None]:
    conf = config.get("configurable") if type(config) is dict else None
    if type(conf) is not dict:  # (the common case, a dict in a dict, without a call)
        conf = _configurable(config, what)
    tid = conf.get("thread_id")
    if tid is None or tid == "":
        raise InvalidConfig(
            f"{what}: config['configurable']['thread_id'] is missing; pass "
            "{'configurable': {'thread_id': ...}} (LangGraph needs a thread id to checkpoint)"
        )
    ns = conf.get("checkpoint_ns") or ""
    cid = conf.get("checkpoint_id") or None
    return str(tid), str(ns), None if cid is None else str(cid)


def _check_str(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise InvalidCheckpoint(
            f"{where} must be a str, got {type(value).__name__} {value!r}; nothing was saved"
        )


def _all_plain(versions: Mapping[str, Any]) -> bool:
    """Every channel an exact ``str`` and every version an exact ``str``, ``float`` or int64
    (the common case, one loop without calls; anything else takes the exact checks)."""
    for channel, version in versions.items():
        t = type(version)
        if type(channel) is not str or not (
            t is str or t is float or (t is int and _INT_MIN <= version < _INT_END)
        ):
            return False
    return True


def _check_versions(versions: Mapping[str, Any], where: str) -> None:
    """``new_versions``: str channels, plain versions (stored as typed as they are)."""
    if not _all_plain(versions):
        _check_versions_slow(versions, where)


def _check_versions_slow(versions: Mapping[str, Any], where: str) -> None:
    for channel, version in versions.items():
        if type(channel) is not str:  # (the message is built only for a bad one)
            _check_str(channel, f"{where} key {channel!r}")
        if not (isinstance(version, (str, float)) or is_int(version)):
            raise InvalidCheckpoint(
                f"{where}[{channel!r}] is a {type(version).__name__} ({version!r}); LangGraph "
                "versions are str, int or float: use the saver's get_next_version"
            )


def _plain_versions(versions: Mapping[str, Any]) -> dict[str, str | int | float]:
    return dict(versions) if _all_plain(versions) else _plain_versions_slow(versions)


def _plain_versions_slow(versions: Mapping[str, Any]) -> dict[str, str | int | float]:
    out: dict[str, str | int | float] = {}
    for channel, version in versions.items():
        if type(version) not in (str, int, float) or (type(version) is int and not is_int(version)):
            raise InvalidCheckpoint(
                f"channel_versions[{channel!r}] is a {type(version).__name__} "
                f"({version!r}); LangGraph versions are str, int or float: use the saver's "
                "get_next_version"
            )
        out[str(channel)] = version
    return out


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }
