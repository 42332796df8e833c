"""Exit codes of the CLI, one exception carrying them."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the controller is unreachable, failed, or a rollout failed
EXIT_BAD_INPUT = 2  # the operator's input (file, arguments, a 4xx from the server)


class CliError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
