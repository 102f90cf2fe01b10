"""The probe's MASTER_PORT check: a port held a moment by a run that just ended is waited for; one that stays
taken is reported with the process that listens on it."""
import importlib.util
import os
import socket
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _probe():
    spec = importlib.util.spec_from_file_location("flagperf_probe_under_test", ROOT / "launcher" / "probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", 0))
    s.listen(1)
    return s


def test_a_taken_port_names_who_listens_and_a_free_one():
    probe = _probe()
    s = _listener()
    try:
        port = s.getsockname()[1]
        info = probe.port_info(port, settle_s=0.3)
        assert info["free"] is False
        assert "Address already in use" in info["error"]
        assert f"pid {os.getpid()} " in " ".join(info["holders"])
        assert info["free_port"] and info["free_port"] > port
    finally:
        s.close()


def test_a_port_freed_while_the_probe_waits_is_free():
    probe = _probe()
    s = _listener()
    port = s.getsockname()[1]
    timer = threading.Timer(0.5, s.close)
    timer.start()
    try:
        info = probe.port_info(port, settle_s=30)
        assert info == {"port": port, "free": True, "error": None}
    finally:
        timer.cancel()
        s.close()


def test_no_listener_no_holders():
    probe = _probe()
    s = _listener()
    port = s.getsockname()[1]
    s.close()
    assert probe.port_holders(port) == []
