"""The optimizer and schedule names (standard library only: the config imports them)."""

OPTIMIZERS: tuple[str, ...] = ("adamw", "muon")
SCHEDULES: tuple[str, ...] = ("cosine", "wsd")
