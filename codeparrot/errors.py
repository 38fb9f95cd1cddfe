"""Exceptions raised by the library. Only the CLI turns them into messages and exit codes."""

from __future__ import annotations


class CodeparrotError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""


class ConfigError(CodeparrotError, ValueError):
    """A configuration value is invalid. The message names every offending field."""


class DataError(CodeparrotError):
    """Input data is missing, unreadable or does not follow the documented schema."""


class CheckpointError(CodeparrotError):
    """A checkpoint or tokenizer directory is missing, incomplete or incompatible."""


class ExecutionNotAllowed(CodeparrotError):
    """Running untrusted code was not explicitly allowed by the user."""
