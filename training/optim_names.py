"""The optimizer and schedule names (declared with the shared settings)."""

from codeparrot.options import OPTIMIZERS, SCHEDULES

__all__ = ["OPTIMIZERS", "SCHEDULES"]
