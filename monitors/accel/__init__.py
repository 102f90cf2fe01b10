"""Accelerator plug-ins: how a host's accelerators are counted (launcher/probe.py --accel NAME) and sampled
(monitors/monitor.py --gpu NAME). A vendor profile names its plug-in as ``gpu_monitor`` (docs/vendors.md).

One module per plug-in, ``monitors/accel/<name>.py``; modules whose name starts with ``_`` are helpers, not
plug-ins. Every plug-in has:

``SOURCE``
    the ``source`` it reports in monitor_status.json (``nvml``, ``npu-smi``, ``cnmon``).
``count() -> (int, str | None)``
    the number of accelerators on this host, and ``None``; or ``(0, reason)`` when it cannot count them (the
    tool is missing or failed, its output is unreadable). Cheap, called by the host probe.
``open(log) -> (sampler | None, str | None)``
    a sampler of every accelerator, or ``(None, reason)``. ``log(msg)`` writes a line to monitor.log,
    ``log.once(msg)`` only the first time that message comes.

A sampler has ``status`` (a dict for monitor_status.json: ``available``, ``source``, ``count``, ``devices``
[{``index``, ``name``, ...}]), ``read(now) -> [row, ...]`` and ``close()``. ``read`` returns one row per
accelerator, a dict of plain numbers: ``gpu`` (the device index) first, then any of ``temp_c``, ``power_w``,
``mem_used_mib``, ``mem_total_mib``, ``util_pct``; a field the sampler cannot read is left out. A failure is
logged (once per message), never returned as a row: ``read`` returns ``[]`` then.

Plug-ins that read a vendor's command-line tool run it with an argv list and a timeout (``_cli.run_tool``) and
have a pure ``parse(text) -> (devices, error)`` that never raises, unit-tested on recorded outputs
(tests/unit/fixtures/accel/).

Plug-ins run on the benchmarked hosts: standard library only (a vendor library such as pynvml is imported
inside ``count``/``open``), Python >= 3.9, never the ``flagperf`` package.
"""
