"""flagperf: benchmark AI accelerator clusters."""

__version__ = "0.1.0"
