"""The `rubricrl` command (typer + rich): one module per command group, `rubricrl.cli:app` the entry point."""

from rubricrl.cli.main import app

__all__ = ["app"]
