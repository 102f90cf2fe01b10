"""Exit codes and the errors that map to them."""

EXIT_OK = 0
EXIT_CASE_FAILED = 1
EXIT_CONFIG = 2
EXIT_HOSTS = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130


class FlagperfError(Exception):
    pass


class ConfigError(FlagperfError):
    """One or more problems in the configuration files; each is a one-line message. Exit code 2."""

    def __init__(self, problems):
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class Interrupted(BaseException):
    """Raised in the main thread on SIGINT/SIGTERM. Exit code 130. A BaseException, like KeyboardInterrupt, so
    that no ``except Exception`` on the way (a host step that fails "normally") can swallow it."""
